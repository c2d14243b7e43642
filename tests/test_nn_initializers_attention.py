"""kiln.nn.initializers (statistics, fans, errors, and values equal to JAX's for fixed keys) and
kiln.nn.dot_product_attention (against a float64 NumPy reference with masks, causal and local
windows, sequence lengths and grouped-query heads; derivatives against finite differences)."""

import numpy as np
import pytest

import kiln
import kiln.nn as nn
from kiln.test_util import check_grads

init = nn.initializers

# JAX's values (jax_threefry_partitionable=False) for PRNGKey(seed), float32, flattened.
_JAX_VALUES = {
    (0, "glorot_normal"): [
        0.6719295382499695,
        -0.623824954032898,
        0.25656658411026,
        0.34516721963882446,
        -0.22677673399448395,
        0.3986361622810364,
        0.266047865152359,
        -1.055719256401062,
        -0.12426064163446426,
        -0.564285159111023,
        -0.39088550209999084,
        0.1585303246974945,
    ],
    (0, "glorot_uniform"): [
        0.7091947793960571,
        -0.6744898557662964,
        0.31730151176452637,
        0.41705724596977234,
        -0.2822498083114624,
        0.47351229190826416,
        0.32831010222435,
        -0.8900967240333557,
        -0.15715859830379486,
        -0.6274682879447937,
        -0.46551913022994995,
        0.1996324360370636,
    ],
    (0, "he_normal"): [
        0.2037258893251419,
        -1.3477869033813477,
        0.6999660134315491,
        1.3146605491638184,
        0.26504191756248474,
        -0.12742096185684204,
    ],
    (0, "he_uniform"): [
        0.25807708501815796,
        -1.386728286743164,
        0.8381944298744202,
        1.3654735088348389,
        0.33451637625694275,
        -0.16194038093090057,
    ],
    (0, "lecun_normal"): [
        0.14405594766139984,
        -0.953029215335846,
        0.49495068192481995,
        0.9296053051948547,
        0.18741291761398315,
        -0.09010021388530731,
    ],
    (0, "lecun_uniform"): [
        0.1824880689382553,
        -0.9805650115013123,
        0.5926929712295532,
        0.9655356407165527,
        0.23653879761695862,
        -0.11450914293527603,
    ],
    (0, "normal"): [
        0.9080431461334229,
        -0.3774425685405731,
        0.16994453966617584,
        -0.26741766929626465,
    ],
    (0, "uniform"): [1.93064284324646, 0.4503178596496582, 1.2660598754882812, 0.5927636623382568],
    (0, "truncated_normal"): [
        1.5905910730361938,
        -0.7138360142707825,
        0.32385754585266113,
        -0.5082287192344666,
    ],
    (0, "vs_conv"): [
        -0.03864466771483421,
        0.05020424723625183,
        0.11302591860294342,
        0.0868970975279808,
        -0.16706734895706177,
        0.06266788393259048,
        0.127477765083313,
        0.006642319727689028,
        -0.17528387904167175,
        -0.052414774894714355,
        -0.3078280985355377,
        -0.12582899630069733,
        -0.08710794895887375,
        0.17941583693027496,
        -0.003257016884163022,
        0.1495199054479599,
        0.21479448676109314,
        -0.16677771508693695,
        0.2940254211425781,
        0.015534198842942715,
        -0.24105305969715118,
        0.187674418091774,
        0.041487980633974075,
        0.27338823676109314,
        -0.06666932255029678,
        0.582163393497467,
        -0.1961706131696701,
        -0.10168498754501343,
        0.05756298452615738,
        -0.02829417772591114,
        0.318353533744812,
        0.3240814507007599,
        0.02252623625099659,
        0.05018233135342598,
        -0.2575513422489166,
        -0.48769697546958923,
    ],
    (0, "vs_batch"): [
        0.07707587629556656,
        1.076139211654663,
        0.26506534218788147,
        0.8410959839820862,
        0.29857137799263,
        -0.674111008644104,
        0.550815999507904,
        0.8018595576286316,
        -0.6454189419746399,
        -0.39921244978904724,
        0.5372194051742554,
        0.6670809984207153,
        -0.2930196225643158,
        -0.8423062562942505,
        -1.0298460721969604,
        0.24522216618061066,
    ],
    (0, "orthogonal"): [
        0.6910465955734253,
        0.3474903404712677,
        0.2671970725059509,
        -0.5747268199920654,
        -0.16492420434951782,
        -0.010765899904072285,
        -0.800024688243866,
        -0.5767533183097839,
        0.24541349709033966,
        0.6977049112319946,
        -0.43202799558639526,
        0.51607346534729,
    ],
    (0, "orthogonal_ax0"): [
        1.3820931911468506,
        0.6949806809425354,
        0.5343941450119019,
        -1.1494536399841309,
        -0.32984840869903564,
        -0.02153179980814457,
        -1.600049376487732,
        -1.1535066366195679,
        0.4908269941806793,
        1.3954098224639893,
        -0.8640559911727905,
        1.03214693069458,
    ],
    (0, "delta_orthogonal"): [
        0.0,
        0.0,
        0.0,
        0.0,
        0.9829336404800415,
        0.18396064639091492,
        0.18396064639091492,
        -0.9829335808753967,
        0.0,
        0.0,
        0.0,
        0.0,
    ],
    (42, "glorot_normal"): [
        0.2146662026643753,
        -0.6640699505805969,
        -0.29710474610328674,
        1.015715479850769,
        -0.7281284928321838,
        -0.3519060015678406,
        0.3218344748020172,
        0.05963660031557083,
        -0.4766894280910492,
        -0.21580886840820312,
        -0.3168591260910034,
        -0.34550145268440247,
    ],
    (42, "glorot_uniform"): [
        0.26781103014945984,
        -0.7037243843078613,
        -0.3638339638710022,
        0.8781716227531433,
        -0.7460611462593079,
        -0.42433789372444153,
        0.39149707555770874,
        0.0758296325802803,
        -0.5501829385757446,
        -0.26917779445648193,
        -0.3859778642654419,
        -0.4174194633960724,
    ],
    (42, "he_normal"): [
        0.6604483127593994,
        1.1900087594985962,
        1.2047216892242432,
        -0.8722581267356873,
        -0.9532144069671631,
        0.13694380223751068,
    ],
    (42, "he_uniform"): [
        0.7961157560348511,
        1.278924822807312,
        1.2896854877471924,
        -1.0108745098114014,
        -1.0855656862258911,
        0.17398662865161896,
    ],
    (42, "lecun_normal"): [
        0.46700745820999146,
        0.8414632081985474,
        0.8518667817115784,
        -0.6167795658111572,
        -0.6740243434906006,
        0.09683388471603394,
    ],
    (42, "lecun_uniform"): [
        0.5629388689994812,
        0.9043364524841309,
        0.9119454026222229,
        -0.714796245098114,
        -0.7676109075546265,
        0.12302713096141815,
    ],
    (42, "normal"): [
        0.09346773475408554,
        0.5326667428016663,
        -0.7796565890312195,
        -0.7676481008529663,
    ],
    (42, "uniform"): [
        1.1482887268066406,
        1.7132749557495117,
        0.11892223358154297,
        0.1247110366821289,
    ],
    (42, "truncated_normal"): [
        0.17833684384822845,
        0.9961459636688232,
        -1.4084038734436035,
        -1.3899734020233154,
    ],
    (42, "vs_conv"): [
        -0.15072691440582275,
        -0.067776158452034,
        0.09293180704116821,
        0.23109130561351776,
        0.18129269778728485,
        0.0020291355904191732,
        0.01969759166240692,
        0.01448409166187048,
        -0.00383300194516778,
        0.0054998937994241714,
        0.2648775279521942,
        0.05202525854110718,
        0.37806227803230286,
        -0.422746479511261,
        0.34716862440109253,
        -0.08744921535253525,
        0.30769968032836914,
        -0.03324566408991814,
        -0.1927054226398468,
        -0.13249430060386658,
        0.04523475468158722,
        -0.04378586262464523,
        0.051624201238155365,
        0.04012247547507286,
        -0.1403379887342453,
        0.08767406642436981,
        0.042087916284799576,
        0.1662607342004776,
        -0.10215849429368973,
        -0.08671638369560242,
        0.34015142917633057,
        -0.2410965859889984,
        0.3024335503578186,
        -0.2521316111087799,
        -0.12006572633981705,
        0.12652401626110077,
    ],
    (42, "vs_batch"): [
        -0.6003749370574951,
        -0.18845103681087494,
        -1.1286267042160034,
        0.7966723442077637,
        -0.957240879535675,
        0.9516724944114685,
        -0.6828470826148987,
        -1.0501831769943237,
        0.12886229157447815,
        -1.0513885021209717,
        -1.0331875085830688,
        0.2809431850910187,
        0.508141040802002,
        0.4625093340873718,
        -0.7284820675849915,
        -0.8196712732315063,
    ],
    (42, "orthogonal"): [
        0.17720067501068115,
        0.9305330514907837,
        0.266404390335083,
        -0.17814791202545166,
        -0.7234538197517395,
        -0.07400105148553848,
        0.3415513336658478,
        -0.5953831672668457,
        -0.0247072484344244,
        0.15854337811470032,
        -0.8605841398239136,
        -0.48337188363075256,
    ],
    (42, "orthogonal_ax0"): [
        0.3544013500213623,
        1.8610661029815674,
        0.532808780670166,
        -0.3562958240509033,
        -1.446907639503479,
        -0.14800210297107697,
        0.6831026673316956,
        -1.1907663345336914,
        -0.0494144968688488,
        0.31708675622940063,
        -1.7211682796478271,
        -0.9667437672615051,
    ],
    (42, "delta_orthogonal"): [
        0.0,
        0.0,
        0.0,
        0.0,
        0.11903083324432373,
        0.9928905367851257,
        -0.9928905367851257,
        0.11903087794780731,
        0.0,
        0.0,
        0.0,
        0.0,
    ],
}

_CASES = {
    "glorot_normal": (init.glorot_normal(), (3, 4)),
    "glorot_uniform": (init.glorot_uniform(), (3, 4)),
    "he_normal": (init.he_normal(), (2, 3)),
    "he_uniform": (init.he_uniform(), (2, 3)),
    "lecun_normal": (init.lecun_normal(), (2, 3)),
    "lecun_uniform": (init.lecun_uniform(), (2, 3)),
    "normal": (init.normal(0.5), (4,)),
    "uniform": (init.uniform(2.0), (4,)),
    "truncated_normal": (init.truncated_normal(1.0), (4,)),
    "vs_conv": (
        init.variance_scaling(0.7, "fan_out", "normal", in_axis=-2, out_axis=-1),
        (3, 2, 2, 3),
    ),
    "vs_batch": (
        init.variance_scaling(1.3, "fan_avg", "uniform", in_axis=1, out_axis=(2, 3), batch_axis=0),
        (2, 2, 2, 2),
    ),
    "orthogonal": (init.orthogonal(), (3, 4)),
    "orthogonal_ax0": (init.orthogonal(2.0, column_axis=0), (3, 2, 2)),
    "delta_orthogonal": (init.delta_orthogonal(), (3, 2, 2)),
}

# Values that pass through a QR factorization may differ from JAX's in the last bits.
_QR_BASED = {"orthogonal", "orthogonal_ax0", "delta_orthogonal"}


@pytest.mark.parametrize("seed,name", sorted(_JAX_VALUES))
def test_initializer_matches_jax(seed, name):
    f, shape = _CASES[name]
    got = np.asarray(f(kiln.random.PRNGKey(seed), shape, np.float32))
    assert got.shape == shape and got.dtype == np.float32
    want = np.array(_JAX_VALUES[seed, name], np.float32).reshape(shape)
    if name in _QR_BASED:
        np.testing.assert_allclose(got, want, rtol=0, atol=2e-6)
    else:
        np.testing.assert_array_equal(got, want)


def test_aliases_and_constants():
    assert init.xavier_uniform is init.glorot_uniform and init.xavier_normal is init.glorot_normal
    assert init.kaiming_uniform is init.he_uniform and init.kaiming_normal is init.he_normal
    key = kiln.random.PRNGKey(0)
    z = init.zeros(key, (2, 3))
    assert z.dtype == np.float32 and not np.asarray(z).any()
    o = init.ones(key, (2,), np.float16)
    assert o.dtype == np.float16 and (np.asarray(o) == 1).all()
    c = init.constant(2.5)(key, [3])
    np.testing.assert_array_equal(np.asarray(c), [2.5, 2.5, 2.5])
    assert init.constant(1, dtype=np.int32)(key, (2,)).dtype == np.int32
    assert init.normal(dtype=np.float16)(key, (2,)).dtype == np.float16


def _fans(shape):
    receptive = int(np.prod(shape[:-2]))
    return shape[-2] * receptive, shape[-1] * receptive


@pytest.mark.parametrize(
    "factory,scale,mode",
    [
        (init.glorot_uniform, 1.0, "fan_avg"),
        (init.glorot_normal, 1.0, "fan_avg"),
        (init.he_uniform, 2.0, "fan_in"),
        (init.he_normal, 2.0, "fan_in"),
        (init.lecun_uniform, 1.0, "fan_in"),
        (init.lecun_normal, 1.0, "fan_in"),
    ],
)
def test_variance_scaling_statistics(factory, scale, mode):
    shape = (3, 3, 40, 50)
    w = np.asarray(factory()(kiln.random.PRNGKey(3), shape), np.float64)
    fan_in, fan_out = _fans(shape)
    n = {"fan_in": fan_in, "fan_avg": (fan_in + fan_out) / 2}[mode]
    std = np.sqrt(scale / n)
    assert abs(w.mean()) < 0.05 * std
    np.testing.assert_allclose(w.std(), std, rtol=0.03)
    if "uniform" in factory.__name__:
        assert np.abs(w).max() <= np.sqrt(3) * std * (1 + 1e-6)
    else:
        assert np.abs(w).max() <= 2 * std / 0.87962566103423978 * (1 + 1e-6)


def test_simple_distribution_statistics():
    key = kiln.random.PRNGKey(7)
    u = np.asarray(init.uniform(0.5)(key, (20000,)))
    assert u.min() >= 0 and u.max() < 0.5 and abs(u.mean() - 0.25) < 0.005
    n = np.asarray(init.normal(2.0)(key, (20000,)))
    assert abs(n.std() - 2.0) < 0.05
    t = np.asarray(init.truncated_normal(3.0)(key, (20000,)))
    assert np.abs(t).max() <= 6.0 and abs(t.std() - 3.0 * 0.87962566103423978) < 0.06


@pytest.mark.parametrize(
    "shape,axis", [((5, 3), -1), ((3, 5), -1), ((2, 3, 4), -1), ((4, 2, 3), 0)]
)
def test_orthogonal_is_orthogonal(shape, axis):
    w = np.asarray(
        init.orthogonal(1.5, column_axis=axis)(kiln.random.PRNGKey(1), shape), np.float64
    )
    m = np.moveaxis(w, axis, -1).reshape(-1, shape[axis])
    gram = m.T @ m if m.shape[0] >= m.shape[1] else m @ m.T
    np.testing.assert_allclose(gram, 2.25 * np.eye(gram.shape[0]), atol=1e-5)
    assert init.orthogonal()(kiln.random.PRNGKey(1), (0, 3)).shape == (0, 3)


def test_delta_orthogonal_structure():
    w = np.array(init.delta_orthogonal()(kiln.random.PRNGKey(2), (3, 3, 4, 4)))
    centre = w[1, 1]
    np.testing.assert_allclose(centre @ centre.T, np.eye(4), atol=1e-5)
    w[1, 1] = 0
    assert not w.any()


def test_initializer_errors():
    key = kiln.random.PRNGKey(0)
    with pytest.raises(ValueError, match="with default in_axis"):
        init.glorot_uniform()(key, (4,))
    with pytest.raises(ValueError, match="invalid mode"):
        init.variance_scaling(1.0, "fan_bad", "normal")(key, (2, 2))
    with pytest.raises(ValueError, match="invalid distribution"):
        init.variance_scaling(1.0, "fan_in", "cauchy")(key, (2, 2))
    with pytest.raises(ValueError, match="at least a 2D"):
        init.orthogonal()(key, (3,))
    with pytest.raises(ValueError, match="3D, 4D or 5D"):
        init.delta_orthogonal()(key, (3, 3))
    with pytest.raises(ValueError, match="fan_in"):
        init.delta_orthogonal()(key, (3, 4, 2))
    # 1D works with an explicit in_axis.
    assert init.variance_scaling(1.0, "fan_in", "normal", in_axis=0, out_axis=0)(
        key, (4,)
    ).shape == (4,)


# JAX 0.10.2 outputs for these inputs.
_ATTN_Q = [
    [
        [[0.12999999523162842, -0.12999999523162842], [0.6399999856948853, 0.10000000149011612]],
        [[-0.5400000214576721, 0.36000001430511475], [1.2999999523162842, 0.949999988079071]],
        [[-0.699999988079071, -1.2699999809265137], [-0.6200000047683716, 0.03999999910593033]],
    ]
]
_ATTN_K = [
    [
        [[-2.3299999237060547, -0.2199999988079071]],
        [[-1.25, -0.7300000190734863]],
        [[-0.5400000214576721, -0.3199999928474426]],
        [[0.4099999964237213, 1.0399999618530273]],
    ]
]
_ATTN_V = [
    [
        [[-0.12999999523162842, 1.3700000047683716]],
        [[-0.6700000166893005, 0.3499999940395355]],
        [[0.8999999761581421, 0.09000000357627869]],
        [[-0.7400000095367432, -0.9200000166893005]],
    ]
]
_ATTN_OUT = [
    -0.12999999523162842,
    1.3700000047683716,
    -0.12999999523162842,
    1.3700000047683716,
    -0.3285438120365143,
    0.9949727058410645,
    -0.4848081171512604,
    0.6998069286346436,
    -0.15586258471012115,
    0.264856219291687,
    -0.0017488402081653476,
    0.23933419585227966,
]
_ATTN_LSE = [
    1.3085296154022217,
    1.0797080993652344,
    1.772791862487793,
    1.3131492137908936,
    2.2511868476867676,
    1.8826146125793457,
]

# --- dot_product_attention ----------------------------------------------------------------------


def _np_attention(
    q, k, v, bias=None, mask=None, scale=None, causal=False, q_len=None, kv_len=None, window=None
):
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    B, T, N, H = q.shape
    S, K = k.shape[1], k.shape[2]
    G = N // K
    k = np.repeat(k, G, axis=2)
    v = np.repeat(v, G, axis=2)
    scale = 1 / np.sqrt(H) if scale is None else scale
    logits = np.einsum("btnh,bsnh->bnts", q, k) * scale
    if bias is not None:
        logits = logits + bias
    keep = np.ones(logits.shape, bool)
    if mask is not None:
        keep &= mask
    t = np.arange(T)[:, None]
    s = np.arange(S)[None, :]
    if causal:
        keep &= t >= s
    if window is not None:
        keep &= (t <= s + window[0]) & (t >= s - window[1])
    if q_len is not None:
        keep &= (np.arange(T)[None, :, None] < np.asarray(q_len)[:, None, None])[:, None]
    if kv_len is not None:
        keep &= (np.arange(S)[None, None, :] < np.asarray(kv_len)[:, None, None])[:, None]
    logits = np.where(keep, logits, -0.7 * np.finfo(np.float32).max)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    out = np.einsum("bnts,bsnh->btnh", p, v)
    if q_len is not None:
        out *= (np.arange(T)[None, :] < np.asarray(q_len)[:, None])[:, :, None, None]
    return out


def _qkv(rng, B=2, T=4, S=5, N=4, K=2, H=3):
    q = rng.standard_normal((B, T, N, H)).astype(np.float32)
    k = rng.standard_normal((B, S, K, H)).astype(np.float32)
    v = rng.standard_normal((B, S, K, H)).astype(np.float32)
    return q, k, v


@pytest.mark.parametrize("K", [4, 2, 1])
@pytest.mark.parametrize(
    "opts",
    [
        {},
        {"causal": True},
        {"scale": 0.3},
        {"window": (1, 1)},
        {"causal": True, "window": (2, 0)},
        {"q_len": [2, 4], "kv_len": [3, 5]},
        {"bias": True},
        {"mask": True},
        {"bias": True, "mask": True, "causal": True},
    ],
    ids=[
        "plain",
        "causal",
        "scale",
        "window",
        "causal_window",
        "seq_lengths",
        "bias",
        "mask",
        "all",
    ],
)
def test_attention_matches_numpy(K, opts):
    rng = np.random.default_rng(K)
    q, k, v = _qkv(rng, K=K)
    bias = rng.standard_normal((2, 1, 4, 5)).astype(np.float32) if opts.get("bias") else None
    mask = (rng.random((1, 4, 4, 5)) < 0.7) if opts.get("mask") else None
    if mask is not None:
        mask[..., 0] = True  # no fully-masked rows
    q_len = np.array(opts["q_len"], np.int32) if "q_len" in opts else None
    kv_len = np.array(opts["kv_len"], np.int32) if "kv_len" in opts else None
    got = nn.dot_product_attention(
        q,
        k,
        v,
        bias,
        mask,
        scale=opts.get("scale"),
        is_causal=opts.get("causal", False),
        query_seq_lengths=q_len,
        key_value_seq_lengths=kv_len,
        local_window_size=opts.get("window"),
    )
    want = _np_attention(
        q,
        k,
        v,
        bias,
        mask,
        opts.get("scale"),
        opts.get("causal", False),
        q_len,
        kv_len,
        opts.get("window"),
    )
    assert got.shape == q.shape and got.dtype == np.float32
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


def test_attention_3d_inputs_int_window_and_jit():
    rng = np.random.default_rng(5)
    q, k, v = _qkv(rng, B=1)
    f = kiln.jit(lambda q, k, v: nn.dot_product_attention(q, k, v, local_window_size=1))
    got = f(q[0], k[0], v[0])
    assert got.shape == q[0].shape
    np.testing.assert_allclose(
        np.asarray(got), _np_attention(q, k, v, window=(1, 1))[0], rtol=1e-5, atol=1e-5
    )


def test_attention_matches_jax_values():
    q = np.array(_ATTN_Q, np.float32)
    k = np.array(_ATTN_K, np.float32)
    v = np.array(_ATTN_V, np.float32)
    kv_len = np.array([3], np.int32)
    got = nn.dot_product_attention(
        q, k, v, is_causal=True, local_window_size=(1, 0), key_value_seq_lengths=kv_len
    )
    np.testing.assert_allclose(np.asarray(got).ravel(), _ATTN_OUT, rtol=1e-6, atol=1e-6)
    out, lse = nn.dot_product_attention(q, k, v, return_residual=True)
    assert lse.shape == (1, 3, 2)
    np.testing.assert_allclose(np.asarray(lse).ravel(), _ATTN_LSE, rtol=1e-6)


@pytest.mark.parametrize("opts", [{}, {"is_causal": True}, {"local_window_size": (1, 0)}])
def test_attention_grads(opts):
    rng = np.random.default_rng(11)
    q, k, v = _qkv(rng, B=1, T=3, S=4, N=2, K=1, H=2)
    bias = rng.standard_normal((1, 2, 3, 4)).astype(np.float32)

    def f(q, k, v, bias):
        return nn.dot_product_attention(q, k, v, bias, **opts)

    check_grads(f, (q, k, v, bias), order=1, atol=5e-3, rtol=5e-3)


def test_attention_errors():
    rng = np.random.default_rng(0)
    q, k, v = _qkv(rng, N=3, K=2)
    with pytest.raises(ValueError, match="multiple of key/value heads"):
        nn.dot_product_attention(q, k, v)
    q, k, v = _qkv(rng)
    with pytest.raises(ValueError, match="value shape"):
        nn.dot_product_attention(q, k, v[:, :2])
    with pytest.raises(ValueError, match="mask dtype"):
        nn.dot_product_attention(q, k, v, mask=np.ones((1, 1, 4, 5), np.float32))
    with pytest.raises(ValueError, match="query_seq_lengths dtype"):
        nn.dot_product_attention(q, k, v, query_seq_lengths=np.array([1, 2], np.float32))
    with pytest.raises(ValueError, match="Unsupported implementation"):
        nn.dot_product_attention(q, k, v, implementation="triton")
