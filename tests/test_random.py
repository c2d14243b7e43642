"""kiln.random against JAX 0.10.2: hard-coded outputs of the oracle (bit for bit, both counter
layouts, x64 on and off), the seed document's numbers, live comparisons when jax is importable,
known-answer vectors of the hash, statistics of large draws, dtypes, errors, and tracing/jit.

The ORACLE tables below were produced by jax 0.10.2 (jaxlib CPU) with the same expressions
evaluated as `jax.random...`; here they are evaluated with `jax` bound to kiln.
"""

import contextlib
import math

import ml_dtypes
import numpy as np
import pytest
import scipy.stats

import kiln
import kiln.numpy as knp
from kiln.primitives import random_bits

random = kiln.random
needs_jit = pytest.mark.skipif(not hasattr(kiln, "jit"), reason="kiln.jit not available")


@contextlib.contextmanager
def flags(partitionable=None, x64=None):
    """Set kiln's PRNG layout and x64 flags for the block, restoring them afterwards."""
    saved = (kiln.config.threefry_partitionable, kiln.config.enable_x64)
    try:
        if partitionable is not None:
            kiln.config.update("jax_threefry_partitionable", partitionable)
        if x64 is not None:
            kiln.config.update("jax_enable_x64", x64)
        yield
    finally:
        kiln.config.update("jax_threefry_partitionable", saved[0])
        kiln.config.update("jax_enable_x64", saved[1])


def evaluate(expression: str) -> np.ndarray:
    """Evaluate an oracle expression with `jax` meaning kiln."""
    return np.asarray(eval(expression, {"jax": kiln, "jnp": knp}))  # noqa: S307


_WORDS = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def decode(dtype: str, shape: tuple, data: list) -> np.ndarray:
    """An oracle entry as an array (floats are stored as their bit patterns)."""
    dtype = np.dtype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)
    if dtype.kind == "c":
        part = np.dtype(np.float32 if dtype == np.complex64 else np.float64)
        return np.array(data, _WORDS[part.itemsize]).view(part).view(dtype).reshape(shape)
    if dtype.kind == "f" or dtype == ml_dtypes.bfloat16:
        return np.array(data, _WORDS[dtype.itemsize]).view(dtype).reshape(shape)
    return np.array(data, dtype=dtype).reshape(shape)


def assert_bitwise_equal(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    a = np.ascontiguousarray(actual).reshape(-1).view(np.uint8)
    b = np.ascontiguousarray(expected).reshape(-1).view(np.uint8)
    if not np.array_equal(a, b):
        raise AssertionError(f"not bitwise equal:\n actual   {actual!r}\n expected {expected!r}")


def digest(array: np.ndarray) -> tuple:
    import hashlib

    array = np.ascontiguousarray(array)
    return (str(array.dtype), array.shape, hashlib.sha256(array.tobytes()).hexdigest()[:32])


# expression, then JAX 0.10.2's output with jax_threefry_partitionable False and True
# (dtype, shape, values; floats as their bit patterns)
ORACLE = [
    ("jax.random.PRNGKey(0)", ("uint32", (2,), [0, 0]), ("uint32", (2,), [0, 0])),
    (
        "jax.random.PRNGKey(0x123456789)",
        ("uint32", (2,), [0, 591751049]),
        ("uint32", (2,), [0, 591751049]),
    ),
    (
        "jax.random.PRNGKey(-1)",
        ("uint32", (2,), [0, 4294967295]),
        ("uint32", (2,), [0, 4294967295]),
    ),
    (
        "jax.random.PRNGKey(2**31 - 1)",
        ("uint32", (2,), [0, 2147483647]),
        ("uint32", (2,), [0, 2147483647]),
    ),
    (
        "jax.random.split(jax.random.PRNGKey(0))",
        ("uint32", (2, 2), [4146024105, 967050713, 2718843009, 1272950319]),
        ("uint32", (2, 2), [1797259609, 2579123966, 928981903, 3453687069]),
    ),
    (
        "jax.random.split(jax.random.PRNGKey(42), 3)",
        ("uint32", (3, 2), [3134548294, 3733159049, 3746501087, 894150801, 801545058, 2363201431]),
        ("uint32", (3, 2), [1832780943, 270669613, 64467757, 2916123636, 2465931498, 255383827]),
    ),
    (
        "jax.random.split(jax.random.PRNGKey(7), (2, 2))",
        (
            "uint32",
            (2, 2, 2),
            [
                51277378,
                1628829261,
                1440439266,
                395909871,
                3088387524,
                4291721531,
                3731608162,
                3705585371,
            ],
        ),
        (
            "uint32",
            (2, 2, 2),
            [
                3625411723,
                1954958720,
                195045567,
                4062205631,
                966301609,
                1948237315,
                276534068,
                1641862660,
            ],
        ),
    ),
    (
        "jax.random.fold_in(jax.random.PRNGKey(0), 1)",
        ("uint32", (2,), [928981903, 3453687069]),
        ("uint32", (2,), [928981903, 3453687069]),
    ),
    (
        "jax.random.fold_in(jax.random.PRNGKey(3), 0xFFFFFFFF)",
        ("uint32", (2,), [2506949003, 3416577034]),
        ("uint32", (2,), [2506949003, 3416577034]),
    ),
    (
        "jax.random.bits(jax.random.PRNGKey(0), (5,))",
        ("uint32", (5,), [2467461003, 428148500, 1688610540, 3840466878, 2562233961]),
        ("uint32", (5,), [4070199207, 4202968722, 1427181096, 2012915765, 2447653815]),
    ),
    (
        "jax.random.bits(jax.random.PRNGKey(1), (2, 3), jnp.uint8)",
        ("uint8", (2, 3), [118, 136, 41, 116, 72, 128]),
        ("uint8", (2, 3), [183, 62, 122, 241, 164, 188]),
    ),
    (
        "jax.random.bits(jax.random.PRNGKey(2), (7,), jnp.uint16)",
        ("uint16", (7,), [60556, 43637, 44160, 12157, 26981, 37014, 9942]),
        ("uint16", (7,), [57961, 56164, 34281, 13769, 15389, 23732, 53604]),
    ),
    (
        "jax.random.bits(jax.random.PRNGKey(3))",
        ("uint32", (), [3716834203]),
        ("uint32", (), [318053758]),
    ),
    (
        "jax.random.uniform(jax.random.PRNGKey(0), (5,))",
        ("float32", (5,), [1058214518, 1036789808, 1053379660, 1063577822, 1058584726]),
        ("float32", (5,), [1064475214, 1064993846, 1051337244, 1055913296, 1058137146]),
    ),
    (
        "jax.random.uniform(jax.random.PRNGKey(9), (2, 3), minval=-2.5, maxval=7.25)",
        (
            "float32",
            (2, 3),
            [1071745041, 3147680640, 1081246983, 1073684843, 1065486029, 1073676945],
        ),
        (
            "float32",
            (2, 3),
            [3221655028, 1088282910, 1070332315, 3217074576, 3198333801, 1085369903],
        ),
    ),
    (
        "jax.random.uniform(jax.random.PRNGKey(4), (6,), jnp.float16)",
        ("float16", (6,), [14998, 14556, 13916, 15330, 14784, 14786]),
        ("float16", (6,), [14354, 14100, 13996, 13616, 15132, 15280]),
    ),
    (
        "jax.random.uniform(jax.random.PRNGKey(4), (6,), jnp.bfloat16, -1., 3.)",
        ("bfloat16", (6,), [16300, 16440, 16200, 16064, 16386, 16272]),
        ("bfloat16", (6,), [16168, 16032, 16424, 48640, 16296, 48976]),
    ),
    (
        "jax.random.uniform(jax.random.PRNGKey(5), (3, 2), minval=jnp.arange(2.), maxval=5.)",
        (
            "float32",
            (3, 2),
            [1079706441, 1081290530, 1080188644, 1081565846, 1051100212, 1079379406],
        ),
        (
            "float32",
            (3, 2),
            [1075133911, 1083563886, 1080784274, 1068543620, 1083330943, 1080917930],
        ),
    ),
    (
        "jax.random.normal(jax.random.PRNGKey(0), (6,))",
        ("float32", (6,), [1044404771, 3215213714, 1059471428, 1067442478, 1048204890, 3186657649]),
        ("float32", (6,), [1070576317, 1073847792, 3202220055, 3181445666, 1043616044, 3212368599]),
    ),
    (
        "jax.random.normal(jax.random.PRNGKey(11), (2, 3))",
        (
            "float32",
            (2, 3),
            [1060452067, 1065052036, 3205844007, 1049154810, 3212264890, 3203652008],
        ),
        (
            "float32",
            (2, 3),
            [3209601800, 3221562525, 1058727647, 3201046325, 1049545516, 3204229396],
        ),
    ),
    (
        "jax.random.normal(jax.random.PRNGKey(12), (6,), jnp.float16)",
        ("float16", (6,), [45662, 48446, 47498, 15371, 48315, 12802]),
        ("float16", (6,), [12945, 48778, 44685, 14633, 14406, 47089]),
    ),
    (
        "jax.random.normal(jax.random.PRNGKey(12), (6,), jnp.bfloat16)",
        ("bfloat16", (6,), [16357, 15561, 16370, 16059, 16417, 15890]),
        ("bfloat16", (6,), [16305, 49131, 15827, 16081, 48986, 48921]),
    ),
    (
        "jax.random.normal(jax.random.PRNGKey(13), (3,), jnp.complex64)",
        (
            "complex64",
            (3,),
            [1058469343, 1056257245, 1055835720, 1052777903, 3210263037, 1060903855],
        ),
        (
            "complex64",
            (3,),
            [1024937878, 3204046016, 1057598413, 3218624659, 3217091018, 1055564143],
        ),
    ),
    (
        "jax.random.randint(jax.random.PRNGKey(0), (6,), 0, 10)",
        ("int32", (6,), [8, 1, 5, 8, 8, 0]),
        ("int32", (6,), [9, 0, 2, 3, 1, 7]),
    ),
    (
        "jax.random.randint(jax.random.PRNGKey(1), (6,), -2**31, 2**31 - 1)",
        ("int32", (6,), [367012164, -908124690, 552987782, 565494292, 2076154393, -95559716]),
        ("int32", (6,), [-413835524, 210002863, -1191255328, -1392002199, 1638955424, 283554476]),
    ),
    (
        "jax.random.randint(jax.random.PRNGKey(2), (6,), 0, 256, jnp.uint8)",
        ("uint8", (6,), [216, 164, 65, 117, 165, 186]),
        ("uint8", (6,), [79, 124, 73, 191, 73, 168]),
    ),
    (
        "jax.random.randint(jax.random.PRNGKey(3), (6,), -5, 5, jnp.int16)",
        ("int16", (6,), [-2, -3, 4, -4, -4, -3]),
        ("int16", (6,), [0, 4, 0, -1, 1, -3]),
    ),
    (
        "jax.random.randint(jax.random.PRNGKey(4), (2, 3), jnp.arange(3), 10)",
        ("int32", (2, 3), [5, 4, 7, 8, 1, 5]),
        ("int32", (2, 3), [4, 3, 7, 0, 7, 5]),
    ),
    (
        "jax.random.randint(jax.random.PRNGKey(5), (4,), 5, 2)",
        ("int32", (4,), [5, 5, 5, 5]),
        ("int32", (4,), [5, 5, 5, 5]),
    ),
    (
        "jax.random.bernoulli(jax.random.PRNGKey(0), 0.3, (10,))",
        ("bool", (10,), [0, 0, 0, 1, 0, 0, 1, 1, 0, 0]),
        ("bool", (10,), [0, 0, 0, 0, 0, 1, 0, 0, 0, 1]),
    ),
    (
        "jax.random.bernoulli(jax.random.PRNGKey(1), jnp.array([0.1, 0.5, 0.9]))",
        ("bool", (3,), [0, 1, 1]),
        ("bool", (3,), [0, 0, 1]),
    ),
    (
        "jax.random.bernoulli(jax.random.PRNGKey(2), 0.5, (8,), mode='high')",
        ("bool", (8,), [0, 0, 1, 1, 0, 1, 0, 1]),
        ("bool", (8,), [0, 0, 1, 0, 1, 1, 0, 1]),
    ),
    (
        "jax.random.choice(jax.random.PRNGKey(0), 10, (5,))",
        ("int32", (5,), [8, 1, 3, 8, 8]),
        ("int32", (5,), [9, 0, 2, 3, 1]),
    ),
    (
        "jax.random.choice(jax.random.PRNGKey(1), 10, (5,), replace=False)",
        ("int32", (5,), [9, 4, 0, 2, 7]),
        ("int32", (5,), [7, 6, 3, 2, 0]),
    ),
    (
        "jax.random.choice(jax.random.PRNGKey(2), jnp.arange(12.).reshape(3, 4), (2,), axis=1)",
        (
            "float32",
            (3, 2),
            [1073741824, 1073741824, 1086324736, 1086324736, 1092616192, 1092616192],
        ),
        ("float32", (3, 2), [1077936128, 0, 1088421888, 1082130432, 1093664768, 1090519040]),
    ),
    (
        "jax.random.choice(jax.random.PRNGKey(3), 4, (8,), p=jnp.array([0.125, 0.25, 0.5, 0.125]))",
        ("int32", (8,), [2, 1, 1, 2, 3, 3, 1, 2]),
        ("int32", (8,), [3, 0, 1, 0, 2, 2, 3, 2]),
    ),
    (
        "jax.random.choice(jax.random.PRNGKey(4), 4, (3,), replace=False, p=jnp.array([0.1, "
        "0.2, 0.3, 0.4]))",
        ("int32", (3,), [3, 1, 2]),
        ("int32", (3,), [3, 0, 1]),
    ),
    (
        "jax.random.permutation(jax.random.PRNGKey(0), 10)",
        ("int32", (10,), [2, 7, 9, 6, 0, 8, 1, 3, 4, 5]),
        ("int32", (10,), [0, 1, 8, 5, 6, 4, 3, 2, 7, 9]),
    ),
    (
        "jax.random.permutation(jax.random.PRNGKey(1), jnp.arange(12).reshape(3, 4), axis=1)",
        ("int32", (3, 4), [1, 3, 2, 0, 5, 7, 6, 4, 9, 11, 10, 8]),
        ("int32", (3, 4), [3, 2, 0, 1, 7, 6, 4, 5, 11, 10, 8, 9]),
    ),
    (
        "jax.random.permutation(jax.random.PRNGKey(2), jnp.arange(12).reshape(3, 4), axis=1, "
        "independent=True)",
        ("int32", (3, 4), [2, 1, 3, 0, 7, 4, 6, 5, 8, 11, 10, 9]),
        ("int32", (3, 4), [2, 1, 3, 0, 4, 7, 6, 5, 10, 9, 11, 8]),
    ),
    (
        "jax.random.categorical(jax.random.PRNGKey(0), jnp.array([0.1, 2.0, -1.0, 0.5]), shape=(8,))",  # noqa: E501
        ("int32", (8,), [1, 1, 1, 1, 1, 3, 1, 3]),
        ("int32", (8,), [1, 3, 2, 3, 1, 1, 1, 1]),
    ),
    (
        "jax.random.categorical(jax.random.PRNGKey(1), jnp.arange(12.).reshape(3, 4) / 4, axis=0)",
        ("int32", (4,), [2, 2, 1, 2]),
        ("int32", (4,), [1, 2, 1, 1]),
    ),
    (
        "jax.random.categorical(jax.random.PRNGKey(2), jnp.arange(8.).reshape(2, 4), "
        "shape=(3, 2), replace=False)",
        ("int32", (3, 2), [3, 2, 2, 3, 1, 1]),
        ("int32", (3, 2), [3, 2, 1, 3, 2, 1]),
    ),
    (
        "jax.random.gumbel(jax.random.PRNGKey(0), (6,))",
        ("float32", (6,), [1058476763, 3210075288, 1067107661, 1074541240, 1059658276, 1047506874]),
        ("float32", (6,), [1077614729, 1081428380, 3183898615, 1049490596, 1058234552, 3205909564]),
    ),
    (
        "jax.random.gumbel(jax.random.PRNGKey(1), (6,), mode='high')",
        ("float32", (6,), [1049609659, 1071738878, 1073744977, 1057569677, 3195959014, 1076045977]),
        ("float32", (6,), [1057790973, 1049262033, 1057415609, 1057803198, 3209861649, 1045232258]),
    ),
    (
        "jax.random.gumbel(jax.random.PRNGKey(2), (6,), mode='highest')",
        ("float32", (6,), [3194199487, 1063466605, 3204690968, 3213250604, 3212869639, 1082376001]),
        ("float32", (6,), [3166771279, 3210096334, 1068219338, 3208774965, 1058861678, 1069438460]),
    ),
    (
        "jax.random.gumbel(jax.random.PRNGKey(3), (6,), jnp.float16)",
        ("float16", (6,), [15899, 46534, 15446, 48494, 15664, 14724]),
        ("float16", (6,), [47667, 46639, 48229, 45626, 15717, 12670]),
    ),
    (
        "jax.random.truncated_normal(jax.random.PRNGKey(0), -1., 2., (6,))",
        ("float32", (6,), [1051228225, 3207895534, 1060753187, 1067281399, 1052845380, 1033406368]),
        ("float32", (6,), [1069626941, 1071622803, 3191004714, 1037669698, 1050893586, 3205141900]),
    ),
    (
        "jax.random.truncated_normal(jax.random.PRNGKey(1), jnp.array([-3., 0., 1.]), 2.)",
        ("float32", (3,), [1041284107, 1050739316, 1071870481]),
        ("float32", (3,), [3191219294, 1060143241, 1067808792]),
    ),
    (
        "jax.random.exponential(jax.random.PRNGKey(0), (6,))",
        ("float32", (6,), [1062911986, 1037504610, 1068328349, 1074773620, 1063805413, 1058705529]),
        ("float32", (6,), [1077726950, 1081473707, 1053740146, 1059185393, 1062731126, 1043940533]),
    ),
    (
        "jax.random.exponential(jax.random.PRNGKey(1), (6,), jnp.bfloat16)",
        ("bfloat16", (6,), [16158, 16194, 15918, 16155, 16041, 16177]),
        ("bfloat16", (6,), [16287, 16014, 16166, 16433, 16259, 16298]),
    ),
    (
        "jax.random.laplace(jax.random.PRNGKey(0), (6,))",
        ("float32", (6,), [3190110062, 1070491929, 3207158052, 3217474527, 3193683769, 1036585005]),
        ("float32", (6,), [3222303331, 3226050091, 1053897580, 1032095730, 3189386623, 1066239208]),
    ),
    (
        "jax.random.laplace(jax.random.PRNGKey(1), (6,), jnp.float16)",
        ("float16", (6,), [46640, 45241, 48405, 14667, 15881, 48644]),
        ("float16", (6,), [14985, 16776, 47183, 47494, 45391, 16113]),
    ),
    (
        "jax.random.logistic(jax.random.PRNGKey(0), (6,))",
        ("float32", (6,), [1050261672, 3222067345, 1065824752, 1074304487, 1053313190, 3191868056]),
        ("float32", (6,), [1077501497, 1081382888, 3207767447, 3187703960, 1049629512, 3218019678]),
    ),
    (
        "jax.random.logistic(jax.random.PRNGKey(1), (6,), jnp.float16)",
        ("float16", (6,), [14672, 13416, 16190, 48187, 49196, 16424]),
        ("float16", (6,), [48396, 49886, 15127, 15456, 13546, 49326]),
    ),
    (
        "jax.random.rademacher(jax.random.PRNGKey(0), (8,))",
        ("int32", (8,), [-1, 1, 1, -1, 1, -1, 1, -1]),
        ("int32", (8,), [-1, -1, 1, 1, -1, 1, 1, -1]),
    ),
]

# large draws: (dtype, shape, first 32 hex digits of the SHA-256 of the bytes)
ORACLE_DIGESTS = [
    (
        "jax.random.bits(jax.random.PRNGKey(5), (1001,))",
        ("uint32", (1001,), "9661c7ca567fac2b1d7c3de9e2e81341"),
        ("uint32", (1001,), "51180390f2207880fb79baa47468f8df"),
    ),
    (
        "jax.random.uniform(jax.random.PRNGKey(6), (20000,), minval=-3.3, maxval=1.7)",
        ("float32", (20000,), "f41614a9f8f3a1b81230c1d53a6d18e7"),
        ("float32", (20000,), "4c6dabfe1b2d7ac717f20b83eac8dd4d"),
    ),
    (
        "jax.random.normal(jax.random.PRNGKey(7), (20000,))",
        ("float32", (20000,), "b66e2dd21d5a2fb6012ac68e50a77e02"),
        ("float32", (20000,), "ccbba370b1f5b9cc7e0cc840f449c8a9"),
    ),
    (
        "jax.random.exponential(jax.random.PRNGKey(8), (20000,))",
        ("float32", (20000,), "f59a2095305f3ece96c0932a022dc84c"),
        ("float32", (20000,), "286832eaf9de74132bbd631336d554ec"),
    ),
    (
        "jax.random.logistic(jax.random.PRNGKey(9), (20000,))",
        ("float32", (20000,), "7252847171222dbd4d002e8d44a575b9"),
        ("float32", (20000,), "faa99780cd6a1cf017398b0cb7e4f607"),
    ),
    (
        "jax.random.gumbel(jax.random.PRNGKey(10), (20000,))",
        ("float32", (20000,), "d1a6c4330703962371d781379be56139"),
        ("float32", (20000,), "df6dafce7ca71b3bac07b77db2f97e60"),
    ),
    (
        "jax.random.truncated_normal(jax.random.PRNGKey(11), -0.5, 3., (20000,))",
        ("float32", (20000,), "a63fad28857a57af7e94b120ae6320c0"),
        ("float32", (20000,), "53962ec937b0e87d2b4ee39d0c2a7be2"),
    ),
    (
        "jax.random.permutation(jax.random.PRNGKey(12), 5000)",
        ("int32", (5000,), "6118a0dbe1680256a8ccc222e94e3097"),
        ("int32", (5000,), "f6a4359bef7ce0cd880664c15733a0eb"),
    ),
    (
        "jax.random.laplace(jax.random.PRNGKey(13), (20000,))",
        ("float32", (20000,), "e939418e392f5320d3030efac04fedc4"),
        ("float32", (20000,), "1b53e32207c338ddc3121db021261203"),
    ),
    (
        "jax.random.normal(jax.random.PRNGKey(14), (5000,), jnp.float16)",
        ("float16", (5000,), "be77019be77ed20962398a98e36a6599"),
        ("float16", (5000,), "8788048af6c02d82736c53f0b6174531"),
    ),
]

# with jax_enable_x64
ORACLE_X64 = [
    (
        "jax.random.PRNGKey(0x123456789)",
        ("uint32", (2,), [1, 591751049]),
        ("uint32", (2,), [1, 591751049]),
    ),
    (
        "jax.random.PRNGKey(-1)",
        ("uint32", (2,), [4294967295, 4294967295]),
        ("uint32", (2,), [4294967295, 4294967295]),
    ),
    (
        "jax.random.split(jax.random.PRNGKey(2**40 + 5), 2)",
        ("uint32", (2, 2), [2588430962, 1672726310, 3246284531, 1850734787]),
        ("uint32", (2, 2), [841998169, 2557459351, 316930262, 1451589314]),
    ),
    (
        "jax.random.bits(jax.random.PRNGKey(0), (5,))",
        (
            "uint64",
            (5,),
            [
                6546845030869727645,
                11145505997521511287,
                7887538918663226027,
                4254113931155465902,
                6084817734820532975,
            ],
        ),
        (
            "uint64",
            (5,),
            [
                7719171245655871230,
                3989946895414531357,
                17807037942121513089,
                10597664315880824766,
                9817845818006947190,
            ],
        ),
    ),
    (
        "jax.random.uniform(jax.random.PRNGKey(1), (5,))",
        (
            "float64",
            (5,),
            [
                4604977060172646622,
                4599309639127170112,
                4593591187963957888,
                4603112858233563512,
                4601279303087531140,
            ],
        ),
        (
            "float64",
            (5,),
            [
                4593178043172680992,
                4601845810764653408,
                4603296285720343906,
                4605658345594196618,
                4596461520462493096,
            ],
        ),
    ),
    (
        "jax.random.randint(jax.random.PRNGKey(2), (5,), -2**40, 2**40)",
        ("int64", (5,), [-116245562486, -694537166022, 840250689062, 51205945002, -808375042438]),
        ("int64", (5,), [657192771542, 829335362493, -632423219419, -789787472905, 338015742215]),
    ),
    (
        "jax.random.normal(jax.random.PRNGKey(3), (5,), jnp.float32)",
        ("float32", (5,), [3209927371, 3198282546, 1072066996, 1062870439, 1053789970]),
        ("float32", (5,), [3216580339, 1069877872, 1053022172, 1073496053, 3205919071]),
    ),
    (
        "jax.random.bits(jax.random.PRNGKey(4), (3,), jnp.uint16)",
        ("uint16", (3,), [63894, 22643, 35010]),
        ("uint16", (3,), [33387, 29012, 27369]),
    ),
    (
        "jax.random.normal(jax.random.PRNGKey(5), (4,))",
        (
            "float64",
            (4,),
            [
                13828838645191384078,
                13836183597348384989,
                13814936544172647771,
                13832052708288970445,
            ],
        ),
        (
            "float64",
            (4,),
            [4599857256499039668, 13833585367091925763, 4607018226618938793, 4602319992725688549],
        ),
    ),
    (
        "jax.random.exponential(jax.random.PRNGKey(6), (4,))",
        (
            "float64",
            (4,),
            [4608090415826779031, 4607057363709982014, 4606627016543292401, 4603735560234782075],
        ),
        (
            "float64",
            (4,),
            [4604711725842195500, 4610752848360796247, 4594097668344082955, 4607426812655240554],
        ),
    ),
    (
        "jax.random.logistic(jax.random.PRNGKey(7), (4,))",
        (
            "float64",
            (4,),
            [
                13840029960297018483,
                13825920602622210938,
                13827707806010129349,
                13835705005312408540,
            ],
        ),
        (
            "float64",
            (4,),
            [4610285889709513505, 13837412289353977552, 13831621136817510056, 13836580977523777161],
        ),
    ),
    (
        "jax.random.gumbel(jax.random.PRNGKey(8), (4,))",
        (
            "float64",
            (4,),
            [4595031727297124711, 4613314299771844283, 4611441790034647305, 13821920231081195622],
        ),
        (
            "float64",
            (4,),
            [4612549896430432655, 4612897076090304859, 4602892053079444160, 13822592873525894088],
        ),
    ),
    (
        "jax.random.laplace(jax.random.PRNGKey(9), (4,))",
        (
            "float64",
            (4,),
            [13828845721789763039, 4604129018304934904, 4612082998307431470, 4601552679541354079],
        ),
        (
            "float64",
            (4,),
            [13823838887093163984, 4613281742952286380, 13822139166120727960, 4594009919811850474],
        ),
    ),
    (
        "jax.random.truncated_normal(jax.random.PRNGKey(10), -0.3, 1.7, (4,))",
        (
            "float64",
            (4,),
            [4598581451012711542, 4593061180400875129, 4602017992233573281, 13820107527915317621],
        ),
        (
            "float64",
            (4,),
            [13818588634887800049, 4591026672433531558, 4608565820393319065, 4594517141587648000],
        ),
    ),
    (
        "jax.random.uniform(jax.random.PRNGKey(11), (4,), minval=-3.3, maxval=1.7)",
        (
            "float64",
            (4,),
            [4609909683196752761, 13832918804593941146, 13804543626199552448, 4609848599079021121],
        ),
        (
            "float64",
            (4,),
            [13830724066209091221, 4608515760502740111, 4604814374256721124, 4602700734291984894],
        ),
    ),
    (
        "jax.random.normal(jax.random.PRNGKey(12), (2,), jnp.complex128)",
        (
            "complex128",
            (2,),
            [13803234767031702040, 4604607629810360401, 4602510300003019869, 4589505489961761378],
        ),
        (
            "complex128",
            (2,),
            [
                13804937591523045631,
                13815594853901169252,
                13819419505090096418,
                13828844759649632331,
            ],
        ),
    ),
]

# large draws with jax_enable_x64
ORACLE_DIGESTS_X64 = [
    (
        "jax.random.normal(jax.random.PRNGKey(15), (20000,))",
        ("float64", (20000,), "8da1801348af80e9a7ed55a17e1fb99e"),
        ("float64", (20000,), "80f48943110b41d2ee5df4bc8101ada7"),
    ),
    (
        "jax.random.logistic(jax.random.PRNGKey(16), (20000,))",
        ("float64", (20000,), "8e45f75795ac99a01411e139b6f48689"),
        ("float64", (20000,), "1342604bc1ea467de14b456a0751abbf"),
    ),
    (
        "jax.random.truncated_normal(jax.random.PRNGKey(17), -2., 0.5, (20000,))",
        ("float64", (20000,), "1c279e366ae1cf08ab93924f187fcb1d"),
        ("float64", (20000,), "3712dec9d202ec4a38528ebd75f6cf31"),
    ),
]


# --- the seed document (jax_threefry_partitionable=False, kiln's default) ----------------------

SEED = 0x123456789
# The document's printed arrays (NumPy prints at most 8 significant digits) ...
SEED_UNIFORM_TEXT = "[0.2918682 , 0.90834665, 0.13555491, 0.08107758, 0.9746183 ]"
SEED_NORMAL_REPR = "Array([-0.67039955,  0.02259737], dtype=float32)"
SEED_SUBKEY_TEXTS = [
    "[[ 1.0308125 , -0.07533383],\n [-0.36027843, -1.270425  ]]",
    "[[ 0.34779412, -0.11094793],\n [ 1.0509511 ,  0.52164143]]",
    "[[ 1.5565109 , -0.9507161 ],\n [ 1.4706124 ,  0.25808835]]",
    "[[-0.5725152 , -1.1480215 ],\n [-0.6206856 , -0.12488112]]",
]
# ... and the exact bits JAX 0.10.2 computes for them (jax_threefry_partitionable=False).
SEED_UNIFORM_BITS = [1049980864, 1063815528, 1040895720, 1034292224, 1064927382]
SEED_NORMAL_BITS = [3207307086, 1018764829]
SEED_SUBKEY_BITS = [
    [1065611690, 3181004960, 3199759978, 3215105353],
    [1051857426, 3185785003, 1065780625, 1057327691],
    [1070021568, 3212010017, 1069300999, 1048847400],
    [3205664859, 3214078558, 3206473024, 3187655084],
]


def text(x) -> str:
    return np.array2string(np.asarray(x), separator=", ")


def words(x) -> list:
    return np.asarray(x).view(np.uint32).reshape(-1).tolist()


def test_default_layout_is_the_seed_documents():
    assert kiln.config.threefry_partitionable is False
    assert kiln.config.read("jax_threefry_partitionable") is False


def test_seed_document_uniform_and_normal():
    key = random.PRNGKey(SEED)
    key, subkey = random.split(key)
    draw = random.uniform(subkey, (5,))
    assert text(draw) == SEED_UNIFORM_TEXT and words(draw) == SEED_UNIFORM_BITS
    first, second = random.normal(key, (2,)), random.normal(key, (2,))
    assert repr(first) == SEED_NORMAL_REPR and repr(second) == SEED_NORMAL_REPR
    assert words(first) == words(second) == SEED_NORMAL_BITS


def test_seed_document_split_into_five():
    key = random.PRNGKey(SEED)
    key, _ = random.split(key)
    # The document ran `key, *subkeys = jax.random.split(key, 5)` twice before printing.
    for _ in range(2):
        key, *subkeys = random.split(key, 5)
    assert len(subkeys) == 4
    draws = [random.normal(s, (2, 2)) for s in subkeys]
    assert [text(d) for d in draws] == SEED_SUBKEY_TEXTS
    assert [words(d) for d in draws] == SEED_SUBKEY_BITS


def test_seed_document_under_jax_default_layout():
    # JAX 0.10.2 defaults to the partitionable layout, which draws different numbers.
    with flags(partitionable=True):
        key = random.PRNGKey(SEED)
        key, subkey = random.split(key)
        draw = random.uniform(subkey, (5,))
        assert text(draw) == "[0.8827039 , 0.88709354, 0.4278561 , 0.92221344, 0.96814275]"
        assert words(draw) == [1063385314, 1063458960, 1054543860, 1064048174, 1064818740]
        assert words(random.normal(key, (2,))) == [1061325257, 3218908489]


# --- oracle tables -------------------------------------------------------------------------------


@pytest.mark.parametrize("partitionable", [False, True])
@pytest.mark.parametrize(
    "expression,expected_original,expected_partitionable", ORACLE, ids=[case[0] for case in ORACLE]
)
def test_matches_jax_bitwise(expression, expected_original, expected_partitionable, partitionable):
    expected = expected_partitionable if partitionable else expected_original
    with flags(partitionable=partitionable):
        assert_bitwise_equal(evaluate(expression), decode(*expected))


@pytest.mark.parametrize("partitionable", [False, True])
@pytest.mark.parametrize(
    "expression,expected_original,expected_partitionable",
    ORACLE_DIGESTS,
    ids=[case[0] for case in ORACLE_DIGESTS],
)
def test_large_draws_match_jax_bitwise(
    expression, expected_original, expected_partitionable, partitionable
):
    expected = expected_partitionable if partitionable else expected_original
    with flags(partitionable=partitionable):
        assert digest(evaluate(expression)) == expected


@pytest.mark.parametrize("partitionable", [False, True])
@pytest.mark.parametrize(
    "expression,expected_original,expected_partitionable",
    ORACLE_X64,
    ids=[case[0] for case in ORACLE_X64],
)
def test_matches_jax_bitwise_with_x64(
    expression, expected_original, expected_partitionable, partitionable
):
    expected = expected_partitionable if partitionable else expected_original
    with flags(partitionable=partitionable, x64=True):
        assert_bitwise_equal(evaluate(expression), decode(*expected))


@pytest.mark.parametrize("partitionable", [False, True])
@pytest.mark.parametrize(
    "expression,expected_original,expected_partitionable",
    ORACLE_DIGESTS_X64,
    ids=[case[0] for case in ORACLE_DIGESTS_X64],
)
def test_large_float64_draws_match_jax_bitwise(
    expression, expected_original, expected_partitionable, partitionable
):
    expected = expected_partitionable if partitionable else expected_original
    with flags(partitionable=partitionable, x64=True):
        assert digest(evaluate(expression)) == expected


# --- live comparison with JAX (only where jax is importable) ------------------------------------

LIVE_EXPRESSIONS = [
    "jax.random.split(jax.random.PRNGKey(123), 7)",
    "jax.random.uniform(jax.random.PRNGKey(5), (4, 5), jnp.float32, -7.5, 0.25)",
    "jax.random.normal(jax.random.fold_in(jax.random.PRNGKey(8), 99), (301,))",
    "jax.random.randint(jax.random.PRNGKey(21), (3, 7), -1000, 77)",
    "jax.random.bits(jax.random.PRNGKey(22), (9,), jnp.uint8)",
    "jax.random.permutation(jax.random.PRNGKey(23), jnp.arange(30).reshape(6, 5))",
    "jax.random.choice(jax.random.PRNGKey(24), 50, (6,), replace=False)",
    "jax.random.categorical(jax.random.PRNGKey(25), jnp.linspace(-1., 1., 12).reshape(3, 4))",
    "jax.random.truncated_normal(jax.random.PRNGKey(26), -0.3, 1.7, (64,))",
    "jax.random.gumbel(jax.random.PRNGKey(27), (64,), jnp.bfloat16)",
    "jax.random.laplace(jax.random.PRNGKey(28), (64,), jnp.float16)",
    "jax.random.bernoulli(jax.random.PRNGKey(29), jnp.linspace(0., 1., 10))",
]


@pytest.mark.parametrize("partitionable", [False, True])
@pytest.mark.parametrize("expression", LIVE_EXPRESSIONS)
def test_live_against_jax(expression, partitionable):
    jax = pytest.importorskip("jax")
    import jax.numpy as jax_numpy

    saved = jax.config.jax_threefry_partitionable
    jax.config.update("jax_threefry_partitionable", partitionable)
    try:
        expected = np.asarray(eval(expression, {"jax": jax, "jnp": jax_numpy}))  # noqa: S307
    finally:
        jax.config.update("jax_threefry_partitionable", saved)
    with flags(partitionable=partitionable):
        assert_bitwise_equal(evaluate(expression), expected)


# --- the hash ----------------------------------------------------------------------------------

# Known-answer vectors of Threefry-2x32 with 20 rounds (Random123's kat_vectors).
THREEFRY_KAT = [
    ((0x00000000, 0x00000000), (0x00000000, 0x00000000), (0x6B200159, 0x99BA4EFE)),
    ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
    ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
]


@pytest.mark.parametrize("key,count,expected", THREEFRY_KAT)
def test_threefry2x32_known_answers(key, count, expected):
    words = [np.array(v, np.uint32) for v in (*key, *count)]
    out = random_bits.threefry2x32(*words)
    assert [int(o) for o in out] == list(expected)


def test_threefry2x32_broadcasts_rank0_keys_and_checks_dtypes():
    x = knp.arange(6, dtype=knp.uint32)
    k1, k2 = np.uint32(0x13198A2E), np.uint32(0x03707344)
    y1, y2 = random_bits.threefry2x32(kiln.Array(k1), kiln.Array(k2), x, x)
    assert y1.shape == y2.shape == (6,) and y1.dtype == np.uint32
    for i in range(6):
        a, b = random_bits.threefry2x32(kiln.Array(k1), kiln.Array(k2), x[i], x[i])
        assert (int(a), int(b)) == (int(y1[i]), int(y2[i]))
    with pytest.raises(TypeError, match="uint32"):
        random_bits.threefry2x32(knp.zeros(2, knp.int32), x[:2], x[:2], x[:2])
    with pytest.raises(TypeError, match="shapes"):
        random_bits.threefry2x32(x, x, x[:3], x[:3])


def test_threefry_impl_does_not_write_its_inputs():
    words = [np.arange(4, dtype=np.uint32) + i for i in range(4)]
    copies = [w.copy() for w in words]
    random_bits.threefry2x32_p.bind(*[kiln.Array(w) for w in words])
    for w, c in zip(words, copies):
        np.testing.assert_array_equal(w, c)


# --- XLA-compatible float math ------------------------------------------------------------------


def test_fma_rounds_once():
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal(20000).astype(np.float32) for _ in range(3))
    got = np.asarray(random_bits.fma(kiln.Array(a), kiln.Array(b), kiln.Array(c)))
    # Exact reference: the float64 product is exact, the sum is done in rationals.
    from fractions import Fraction

    for i in range(0, 20000, 997):
        exact = Fraction(float(a[i])) * Fraction(float(b[i])) + Fraction(float(c[i]))
        assert got[i] == np.float32(_round_fraction_to_float32(exact))
    # where the plain product rounds, fma is closer to the exact value.
    plain = a * b + c
    assert np.any(plain != got)


def test_fma_avoids_double_rounding():
    # a * b + c = 1 + 2**-23 + 2**-24 - 2**-70: float64 rounds it to the float32 midpoint
    # 1 + 2**-23 + 2**-24, which would then round (to even) the wrong way.
    a = np.float32(2.0**-24 * (1 + 2.0**-23))
    b = np.float32(1 - 2.0**-23)
    c = np.float32(1 + 2.0**-23)
    assert np.float32(np.float64(a) * np.float64(b) + np.float64(c)) != c
    assert np.asarray(random_bits.fma(*(kiln.Array(v) for v in (a, b, c)))) == c


def _round_fraction_to_float32(value):
    """Round a Fraction to the nearest float32 (ties to even) via its neighbours."""
    from fractions import Fraction

    guess = np.float32(float(value))
    candidates = [
        np.nextafter(guess, np.float32(-np.inf)),
        guess,
        np.nextafter(guess, np.float32(np.inf)),
    ]
    errors = [abs(Fraction(float(c)) - value) for c in candidates]
    best = min(errors)
    ties = [c for c, e in zip(candidates, errors) if e == best]
    return min(ties, key=lambda c: int(np.array(c).view(np.uint32)) & 1)


@pytest.mark.parametrize(
    "name,reference,domain",
    [
        ("xla_log", np.log, (1e-30, 1e30)),
        ("xla_log1p", np.log1p, (-0.999, 1e6)),
        ("xla_erf", None, (-3.0, 3.0)),
        # erf_inv is ill-conditioned near +-1, where XLA's polynomial loses more ulps.
        ("xla_erf_inv", None, (-0.99, 0.99)),
    ],
)
def test_xla_math_is_within_a_few_ulps(name, reference, domain):
    import scipy.special

    reference = (
        reference or {"xla_erf": scipy.special.erf, "xla_erf_inv": scipy.special.erfinv}[name]
    )
    rng = np.random.default_rng(1)
    low, high = domain
    if low > 0:
        x = np.exp(rng.uniform(np.log(low), np.log(high), 20000)).astype(np.float32)
    else:
        x = rng.uniform(low, high, 20000).astype(np.float32)
    got = np.asarray(getattr(random_bits, name)(kiln.Array(x)))
    exact = reference(x.astype(np.float64))
    ulp = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
    assert np.max(np.abs(got - exact) / ulp) <= 5
    for dtype in (np.float16, ml_dtypes.bfloat16):
        out = getattr(random_bits, name)(kiln.Array(np.clip(x, -6e4, 6e4).astype(dtype)))
        assert out.dtype == dtype
    with flags(x64=True):
        wide = getattr(random_bits, name)(kiln.Array(x.astype(np.float64)))
        assert wide.dtype == np.float64
        np.testing.assert_allclose(np.asarray(wide), exact, rtol=1e-14, atol=1e-300)


def test_xla_math_special_values():
    x = kiln.Array(np.array([0.0, -0.0, 1.0, -1.0, np.inf, np.nan, -2.0], np.float32))
    log = np.asarray(random_bits.xla_log(x))
    assert log[0] == -np.inf and log[1] == -np.inf and log[2] == 0 and np.isnan(log[3])
    assert log[4] == np.inf and np.isnan(log[5]) and np.isnan(log[6])
    log1p = np.asarray(random_bits.xla_log1p(x))
    assert log1p[0] == 0 and log1p[3] == -np.inf and log1p[4] == np.inf and np.isnan(log1p[6])
    erf_inv = np.asarray(random_bits.xla_erf_inv(x))
    assert erf_inv[0] == 0 and erf_inv[2] == np.inf and erf_inv[3] == -np.inf
    assert np.isnan(erf_inv[5])
    erf = np.asarray(random_bits.xla_erf(x))
    assert erf[4] == 1 and erf[0] == 0


def test_xla_float64_math_uses_the_c_library():
    # XLA:CPU's float64 log and erf are the C library's (NumPy's vectorized log differs from
    # it in the last bit now and then).
    x = np.random.default_rng(2).uniform(1e-3, 50.0, 2000)
    with flags(x64=True):
        log = np.asarray(random_bits.xla_log(kiln.Array(x)))
        erf = np.asarray(random_bits.xla_erf(kiln.Array(x - 25.0)))
        special = np.asarray(random_bits.xla_log(kiln.Array(np.array([0.0, -1.0, np.inf]))))
    assert log.tolist() == [math.log(v) for v in x]
    assert erf.tolist() == [math.erf(v - 25.0) for v in x]
    assert special[0] == -np.inf and np.isnan(special[1]) and special[2] == np.inf


# --- statistics of large draws -------------------------------------------------------------------

N = 100_000


@pytest.fixture(scope="module")
def big_key():
    return random.PRNGKey(2024)


def test_uniform_statistics(big_key):
    u = np.asarray(random.uniform(big_key, (N,)), np.float64)
    assert 0 <= u.min() and u.max() < 1
    assert abs(u.mean() - 0.5) < 0.005 and abs(u.var() - 1 / 12) < 0.002
    assert scipy.stats.kstest(u, "uniform").pvalue > 1e-3
    scaled = np.asarray(random.uniform(big_key, (N,), minval=-3.0, maxval=5.0))
    assert -3 <= scaled.min() and scaled.max() < 5 and abs(scaled.mean() - 1) < 0.05


def test_normal_statistics(big_key):
    z = np.asarray(random.normal(big_key, (N,)), np.float64)
    assert abs(z.mean()) < 0.01 and abs(z.std() - 1) < 0.01
    assert scipy.stats.kstest(z, "norm").pvalue > 1e-3
    c = np.asarray(random.normal(big_key, (N,), knp.complex64))
    assert c.dtype == np.complex64
    assert abs(c.real.var() - 0.5) < 0.01 and abs(c.imag.var() - 0.5) < 0.01
    assert abs(np.corrcoef(c.real, c.imag)[0, 1]) < 0.01


@pytest.mark.parametrize(
    "name,distribution",
    [
        ("exponential", scipy.stats.expon),
        ("laplace", scipy.stats.laplace),
        ("logistic", scipy.stats.logistic),
        ("gumbel", scipy.stats.gumbel_r),
    ],
)
def test_continuous_samplers_follow_their_distribution(big_key, name, distribution):
    x = np.asarray(getattr(random, name)(big_key, (N,)), np.float64)
    assert np.all(np.isfinite(x))
    assert abs(x.mean() - distribution.mean()) < 0.02 * max(1, distribution.std())
    assert abs(x.std() - distribution.std()) < 0.02 * distribution.std()
    assert scipy.stats.kstest(x, distribution.cdf).pvalue > 1e-3


def test_gumbel_modes_follow_the_distribution(big_key):
    for mode in ("high", "highest"):
        x = np.asarray(random.gumbel(big_key, (N,), mode=mode), np.float64)
        assert scipy.stats.kstest(x, scipy.stats.gumbel_r.cdf).pvalue > 1e-3


def test_truncated_normal_statistics(big_key):
    x = np.asarray(random.truncated_normal(big_key, -1.0, 2.0, (N,)), np.float64)
    assert -1 < x.min() and x.max() < 2
    dist = scipy.stats.truncnorm(-1.0, 2.0)
    assert abs(x.mean() - dist.mean()) < 0.01
    assert scipy.stats.kstest(x, dist.cdf).pvalue > 1e-3


def test_discrete_samplers(big_key):
    b = np.asarray(random.bernoulli(big_key, 0.3, (N,)))
    assert b.dtype == np.bool_ and abs(b.mean() - 0.3) < 0.005
    r = np.asarray(random.randint(big_key, (N,), -3, 7))
    assert r.dtype == np.int32 and r.min() == -3 and r.max() == 6
    counts = np.bincount(r + 3, minlength=10)
    assert scipy.stats.chisquare(counts).pvalue > 1e-3
    p = np.array([0.1, 0.2, 0.3, 0.4], np.float32)
    c = np.asarray(random.choice(big_key, 4, (N,), p=kiln.Array(p)))
    np.testing.assert_allclose(np.bincount(c, minlength=4) / N, p, atol=0.006)
    logits = np.log(p)
    k = np.asarray(random.categorical(big_key, kiln.Array(logits), shape=(N,)))
    np.testing.assert_allclose(np.bincount(k, minlength=4) / N, p, atol=0.006)
    signs = np.asarray(random.rademacher(big_key, (N,)))
    assert set(np.unique(signs)) == {-1, 1} and abs(signs.mean()) < 0.01


def test_permutations_and_choices_without_replacement():
    key = random.PRNGKey(3)
    perm = np.asarray(random.permutation(key, 1000))
    assert sorted(perm.tolist()) == list(range(1000)) and not np.array_equal(perm, np.arange(1000))
    x = np.arange(20).reshape(4, 5)
    rows = np.asarray(random.permutation(key, kiln.Array(x)))
    assert sorted(map(tuple, rows)) == sorted(map(tuple, x))
    cols = np.asarray(random.permutation(key, kiln.Array(x), axis=1, independent=True))
    assert all(sorted(c) == sorted(r) for c, r in zip(cols.tolist(), x.tolist()))
    picked = np.asarray(random.choice(key, 30, (10,), replace=False))
    assert len(set(picked.tolist())) == 10
    weighted = np.asarray(
        random.choice(key, 6, (6,), replace=False, p=kiln.Array(np.full(6, 1 / 6, np.float32)))
    )
    assert sorted(weighted.tolist()) == list(range(6))
    shuffled = np.asarray(random.shuffle(key, kiln.Array(x), axis=1))
    assert all(sorted(c) == sorted(r) for c, r in zip(shuffled.tolist(), x.tolist()))


def test_split_and_fold_in_give_distinct_keys():
    key = random.PRNGKey(0)
    keys = np.asarray(random.split(key, 1000))
    assert len({tuple(k) for k in keys.tolist()}) == 1000
    folded = {tuple(np.asarray(random.fold_in(key, i)).tolist()) for i in range(100)}
    assert len(folded) == 100
    assert random.split(key, 0).shape == (0, 2)
    assert random.split(key, (2, 3)).shape == (2, 3, 2)


# --- dtypes and shapes ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32])
@pytest.mark.parametrize(
    "name", ["uniform", "normal", "exponential", "laplace", "logistic", "gumbel"]
)
def test_float_samplers_keep_dtype_and_shape(name, dtype):
    key = random.PRNGKey(1)
    for shape in [(), (0,), (3,), (2, 0, 4), (4, 5)]:
        out = getattr(random, name)(key, shape, dtype)
        assert out.dtype == dtype and out.shape == shape and not out.weak_type
        assert np.all(np.isfinite(np.asarray(out, np.float32)))
    if name == "uniform":
        u = np.asarray(getattr(random, name)(key, (1000,), dtype), np.float32)
        assert 0 <= u.min() and u.max() < 1


def test_default_dtypes_follow_x64():
    key = random.PRNGKey(0)
    assert random.uniform(key).dtype == np.float32
    assert random.normal(key, (2,)).dtype == np.float32
    assert random.randint(key, (2,), 0, 5).dtype == np.int32
    assert random.bits(key, (2,)).dtype == np.uint32
    assert random.rademacher(key, (2,)).dtype == np.int32
    with flags(x64=True):
        key = random.PRNGKey(0)
        assert random.uniform(key).dtype == np.float64
        assert random.normal(key, (2,)).dtype == np.float64
        assert random.exponential(key, (2,)).dtype == np.float64
        assert random.randint(key, (2,), 0, 5).dtype == np.int64
        assert random.bits(key, (2,)).dtype == np.uint64
        assert random.normal(key, (2,), knp.complex128).dtype == np.complex128
        assert random.bernoulli(key, 0.5, (3,)).dtype == np.bool_
        u = np.asarray(random.uniform(key, (1000,)))
        # float64 uniforms use 52 random mantissa bits.
        assert len(np.unique(u)) == 1000 and np.any((u * 2.0**30) % 1 != 0)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32])
def test_randint_integer_dtypes(dtype):
    info = np.iinfo(dtype)
    key = random.PRNGKey(4)
    # Bounds are int32 values here (x64 off), as in JAX: 2**32 - 1 would overflow.
    high = min(int(info.max), 2**31 - 1)
    out = np.asarray(random.randint(key, (500,), int(info.min), high, dtype))
    assert out.dtype == dtype and out.min() >= info.min and out.max() < high
    small = np.asarray(random.randint(key, (500,), 1, 4, dtype))
    assert set(small.tolist()) == {1, 2, 3}


def test_randint_degenerate_ranges():
    key = random.PRNGKey(5)
    assert np.all(np.asarray(random.randint(key, (10,), 3, 3)) == 3)
    assert np.all(np.asarray(random.randint(key, (10,), 7, 2)) == 7)
    full = np.asarray(random.randint(key, (2000,), 0, 256, knp.uint8))
    assert full.max() > 250 and full.min() < 5


def test_minval_above_maxval_is_not_an_error():
    out = np.asarray(random.uniform(random.PRNGKey(0), (4,), minval=1.0, maxval=0.0))
    np.testing.assert_array_equal(out, np.ones(4, np.float32))


def test_seeds():
    assert np.asarray(random.PRNGKey(0x123456789)).tolist() == [0, 0x23456789]
    assert np.asarray(random.PRNGKey(np.uint32(0xFFFFFFFF))).tolist() == [0, 0xFFFFFFFF]
    assert np.asarray(random.PRNGKey(True)).tolist() == [0, 1]
    assert np.asarray(random.PRNGKey(knp.int8(-1))).tolist() == [0, 0xFFFFFFFF]
    with flags(x64=True):
        assert np.asarray(random.PRNGKey(0x123456789)).tolist() == [1, 0x23456789]
        assert np.asarray(random.PRNGKey(-1)).tolist() == [0xFFFFFFFF, 0xFFFFFFFF]
        assert np.asarray(random.PRNGKey(2**63 - 1)).tolist() == [0x7FFFFFFF, 0xFFFFFFFF]
        assert np.asarray(random.PRNGKey(knp.int32(-1))).tolist() == [0, 0xFFFFFFFF]
        assert np.asarray(random.PRNGKey(knp.int64(-2))).tolist() == [0xFFFFFFFF, 0xFFFFFFFE]


# --- bad input ---------------------------------------------------------------------------------


def test_errors():
    key = random.PRNGKey(0)
    with pytest.raises(TypeError, match="Shapes must be 1D sequences of concrete values"):
        random.uniform(key, (2.0,))
    with pytest.raises(TypeError, match="dtype float32"):
        random.uniform(knp.zeros(2), (2,))
    with pytest.raises(TypeError, match=r"shape \(3,\)"):
        random.normal(knp.zeros(3, knp.uint32), (2,))
    with pytest.raises(TypeError, match="PRNG key"):
        random.uniform(5, (2,))
    with pytest.raises(TypeError, match="unexpected PRNG key type"):
        random.uniform([0, 1], (2,))
    with pytest.raises(ValueError, match="accepts a single key"):
        random.uniform(random.split(key, 3), (2,))
    with pytest.raises(ValueError, match="accepts a single key"):
        random.split(random.split(key, 3))
    with pytest.raises(ValueError, match="must be a float dtype"):
        random.uniform(key, (2,), knp.int32)
    with pytest.raises(ValueError, match="must be a float or complex dtype"):
        random.normal(key, (2,), knp.int32)
    with pytest.raises(TypeError, match="only accepts integer dtypes"):
        random.randint(key, (2,), 0, 10, knp.float32)
    with pytest.raises(ValueError, match="Incompatible shapes for broadcasting"):
        random.randint(key, (3,), knp.zeros(2, knp.int32), 10)
    with pytest.raises(ValueError, match="unsigned int dtype"):
        random.bits(key, (2,), knp.int32)
    with pytest.raises(TypeError, match="floating dtype"):
        random.bernoulli(key, 2)
    with pytest.raises(ValueError, match="Cannot take a larger sample"):
        random.choice(key, 5, (6,), replace=False)
    with pytest.raises(ValueError, match="a must be greater than 0"):
        random.choice(key, 0, (2,))
    with pytest.raises(TypeError, match="must be a sequence"):
        random.choice(key, 5, 3)
    with pytest.raises(ValueError, match="p must be None or a 1D vector"):
        random.choice(key, knp.arange(5), (2,), p=knp.ones(4))
    with pytest.raises(TypeError, match="x must be an integer"):
        random.permutation(key, 2.5)
    with pytest.raises(ValueError, match="Must provide valid mode"):
        random.gumbel(key, (2,), mode="bad")
    with pytest.raises(ValueError, match="expected 'high' or 'low'"):
        random.bernoulli(key, 0.5, mode="middle")
    with pytest.raises(TypeError, match="scalar seed"):
        random.PRNGKey(knp.zeros(2, knp.int32))
    with pytest.raises(TypeError, match="seed must be an integer"):
        random.PRNGKey(1.5)
    with pytest.raises(OverflowError):
        random.PRNGKey(2**63)
    with pytest.raises(TypeError, match="fold_in accepts a scalar"):
        random.fold_in(key, knp.arange(2))
    with pytest.raises(OverflowError, match="out of bounds for uint32"):
        random.fold_in(key, -1)
    with pytest.raises(ValueError, match="parameter shapes must be broadcast-compatible"):
        random.bernoulli(key, knp.array([0.1, 0.9]), (3, 1))
    with pytest.raises(ValueError, match="cannot exceed number of categories"):
        random.categorical(key, knp.zeros(3), shape=(4,), replace=False)


# --- tracing and jit -----------------------------------------------------------------------------

SAMPLERS = {
    "split": lambda k: random.split(k, 3),
    "fold_in": lambda k: random.fold_in(k, 17),
    "bits8": lambda k: random.bits(k, (9,), knp.uint8),
    "uniform": lambda k: random.uniform(k, (4, 3), minval=-2.0, maxval=3.0),
    "normal": lambda k: random.normal(k, (5,)),
    "normal_f16": lambda k: random.normal(k, (5,), knp.float16),
    "randint": lambda k: random.randint(k, (6,), -4, 9),
    "bernoulli": lambda k: random.bernoulli(k, 0.25, (7,)),
    "choice": lambda k: random.choice(k, 10, (4,), replace=False),
    "choice_p": lambda k: random.choice(k, 3, (5,), p=knp.array([0.5, 0.25, 0.25])),
    "permutation": lambda k: random.permutation(k, knp.arange(12).reshape(4, 3)),
    "categorical": lambda k: random.categorical(k, knp.array([[0.0, 1.0, 2.0]]), shape=(4, 1)),
    "gumbel": lambda k: random.gumbel(k, (5,), mode="highest"),
    "truncated_normal": lambda k: random.truncated_normal(k, -0.5, 0.5, (5,)),
    "exponential": lambda k: random.exponential(k, (5,)),
    "laplace": lambda k: random.laplace(k, (5,)),
    "logistic": lambda k: random.logistic(k, (5,)),
}


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_make_jaxpr_traces_every_sampler(name):
    key = random.PRNGKey(11)
    closed = kiln.make_jaxpr(SAMPLERS[name])(key)
    text = str(closed)
    assert "threefry2x32" in text
    expected = SAMPLERS[name](key)
    assert tuple(closed.out_avals[0].shape) == tuple(expected.shape)
    assert closed.out_avals[0].dtype == expected.dtype


@needs_jit
@pytest.mark.parametrize(
    "name",
    [
        "split",
        "fold_in",
        "bits8",
        "uniform",
        "normal",
        "randint",
        "permutation",
        "categorical",
        "truncated_normal",
    ],
)
def test_jit_equals_eager(name):
    key = random.PRNGKey(12)
    eager = np.asarray(SAMPLERS[name](key))
    compiled = np.asarray(kiln.jit(SAMPLERS[name])(key))
    assert_bitwise_equal(compiled, eager)


@needs_jit
def test_jit_with_traced_seed_and_layout_flag():
    draw = kiln.jit(lambda seed: random.uniform(random.PRNGKey(seed), (3,)))
    for seed in (0, 7, -3):
        assert_bitwise_equal(
            np.asarray(draw(seed)), np.asarray(random.uniform(random.PRNGKey(seed), (3,)))
        )
    # The layout flag is part of the compile-cache key: flipping it retraces.
    original = np.asarray(draw(1))
    with flags(partitionable=True):
        flipped = np.asarray(draw(1))
        assert_bitwise_equal(flipped, np.asarray(random.uniform(random.PRNGKey(1), (3,))))
    assert not np.array_equal(original, flipped)


def test_make_jaxpr_of_traced_seed_and_fold_in():
    closed = kiln.make_jaxpr(lambda s, d: random.fold_in(random.PRNGKey(s), d))(3, 4)
    assert closed.out_avals[0].shape == (2,)
    assert "convert_element_type" in str(closed)


# --- typed keys --------------------------------------------------------------------------------


def test_typed_keys_print_and_behave_like_jax():
    key = random.key(0)
    assert repr(key) == "Array((), dtype=key<fry>) overlaying:\n[0 0]"
    assert key.shape == () and str(key.dtype) == "key<fry>"
    keys = random.split(key)
    assert keys.shape == (2,) and isinstance(keys, random.PRNGKeyArray)
    assert repr(keys) == (
        "Array((2,), dtype=key<fry>) overlaying:\n"
        "[[4146024105  967050713]\n [2718843009 1272950319]]"
    )
    first, second = keys
    np.testing.assert_array_equal(
        np.asarray(random.key_data(first)), np.asarray(random.split(random.PRNGKey(0))[0])
    )
    assert_bitwise_equal(
        np.asarray(random.uniform(second, (3,))),
        np.asarray(random.uniform(random.split(random.PRNGKey(0))[1], (3,))),
    )
    wrapped = random.wrap_key_data(random.PRNGKey(3))
    assert bool(wrapped == random.key(3))
    assert random.key_impl(wrapped) == "threefry2x32"
    assert isinstance(random.fold_in(key, 1), random.PRNGKeyArray)
    with pytest.raises(TypeError, match="scalar seed"):
        random.key(knp.arange(2))


@needs_jit
def test_typed_keys_pass_through_jit():
    key = random.key(5)
    out = kiln.jit(lambda k: random.split(k))(key)
    assert isinstance(out, random.PRNGKeyArray)
    np.testing.assert_array_equal(
        np.asarray(random.key_data(out)), np.asarray(random.key_data(random.split(key)))
    )
