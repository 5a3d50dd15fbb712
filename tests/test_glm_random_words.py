"""dpjax.models.glm.random_words: the 8-bit design's random words are bit for bit those of
jax.random.bits (a faster computation of the same function), so studies keep their draws."""

import jax
import jax.numpy as jnp
import pytest

from dpjax.models.glm import GLM, random_words


@pytest.mark.parametrize("shape", [(1,), (7,), (40, 250), (3, 5, 4)])
def test_random_words_equal_jax_random_bits(shape):
    for seed in range(3):
        k = jax.random.fold_in(jax.random.key(seed), 17)
        got = random_words(k, shape)
        want = jax.random.bits(k, shape, jnp.uint32)
        assert got.dtype == jnp.uint32 and got.shape == shape
        assert bool((got == want).all())


def test_random_words_under_vmap_and_jit():
    keys = jax.random.split(jax.random.key(5), 3)
    got = jax.jit(jax.vmap(lambda k: random_words(k, (8, 9))))(keys)
    want = jax.vmap(lambda k: jax.random.bits(k, (8, 9), jnp.uint32))(keys)
    assert bool((got == want).all())


def test_grid8_design_is_the_bits_of_its_key():
    """The simulated design is the bytes of jax.random.bits of the design key (as before)."""
    beta = jnp.zeros(8).at[0].set(1.0)
    data = GLM(design="grid8").simulate(jax.random.key(3), 5, beta)
    key_x, _ = jax.random.split(jax.random.key(3))
    words = jax.random.bits(key_x, (5, 2), jnp.uint32)
    want = jax.lax.bitcast_convert_type(words, jnp.uint8).reshape(5, 8)
    assert bool((data.x == want).all())


def test_row_blocks_divide_n_where_a_divisor_is_near():
    """A block size that leaves a remainder makes XLA copy the design: the largest divisor of n
    in [row_block / 2, row_block] is used instead, else row_block with its remainder."""
    blocks = {(n, bs): GLM(design="grid8", row_block=bs)._block_rows(n)
              for n, bs in [(40000, 32), (210, 64), (50000, 32), (33, 7), (10, 16), (70, 16)]}
    assert blocks == {(40000, 32): 32, (210, 64): 42, (50000, 32): 25, (33, 7): 7,
                      (10, 16): 16, (70, 16): 14}
    assert GLM(design="grid8")._block_rows(100) is None


@pytest.mark.parametrize("n, row_block", [(64, 16), (70, 16), (10, 16), (33, 7)])
def test_blockwise_grid8_design_and_responses_equal_the_unblocked_ones(n, row_block):
    """With row_block the design is hashed block by block (one pass): the same bytes as
    jax.random.bits, whole blocks or with a remainder, and the same responses as without."""
    d = 12
    beta = jnp.linspace(-1.0, 1.0, d)
    blocked = jax.jit(lambda k: GLM(design="grid8", row_block=row_block).simulate(k, n, beta))(
        jax.random.key(11))
    plain = GLM(design="grid8").simulate(jax.random.key(11), n, beta)
    key_x, _ = jax.random.split(jax.random.key(11))
    want = jax.lax.bitcast_convert_type(jax.random.bits(key_x, (n, d // 4), jnp.uint32),
                                        jnp.uint8).reshape(n, d)
    assert bool((blocked.x == want).all()) and bool((plain.x == want).all())
    assert bool((blocked.y == plain.y).all())


@pytest.mark.parametrize("norm", ["linf", "l2"])
def test_the_projection_skipped_for_grid8_codes_is_the_identity(norm):
    """8-bit codes decode inside [-255/256, 255/256]: the clipped gradient that skips the
    projection equals the one computed from the decoded floats, which are projected."""
    from dpjax.models.glm import decode_design

    beta = jnp.linspace(-3.0, 3.0, 16)
    data = GLM(design="grid8").simulate(jax.random.key(2), 50, beta)
    floats = data._replace(x=decode_design(data.x))
    model = GLM(design="grid8", row_block=8)
    got = model.clipped_gradient(beta, data, 1.0, norm)
    want = model.clipped_gradient(beta, floats, 1.0, norm)
    assert float(jnp.max(jnp.abs(got.value - want.value))) <= 1e-7
    assert got.sensitivity == want.sensitivity
    # a model with a smaller design bound must project the codes: then the two differ
    small = GLM(design="grid8", sigma_x=0.5)
    assert float(jnp.max(jnp.abs(small.clipped_gradient(beta, data, 1.0, norm).value
                                 - got.value))) > 1e-4


@pytest.mark.parametrize("design, row_block", [("grid8", None), ("grid8", 8), ("uniform", 8)])
def test_clipped_gradient_on_the_support_equals_the_dense_one(design, row_block):
    """An s-sparse beta with its support given: the predictors read s columns only, the
    gradient is the dense one (8-bit codes, float designs that the box clips, row blocks)."""
    d, s = 16, 3
    truth = jnp.linspace(-3.0, 3.0, d)
    data = GLM(design=design).simulate(jax.random.key(4), 50, truth)
    if design == "uniform":  # values beyond the box, so the clip acts on the gathered columns
        data = data._replace(x=2.5 * data.x)
    beta = jnp.zeros(d).at[jnp.array([2, 9, 13])].set(jnp.array([1.5, -2.0, 0.7]))
    support = jax.lax.top_k(jnp.abs(beta), s)[1]
    model = GLM(design=design, sigma_x=1.0, row_block=row_block)
    dense = model.clipped_gradient(beta, data, 1.0, "linf")
    sparse = jax.jit(lambda b, sp: model.clipped_gradient(b, data, 1.0, "linf", support=sp).value)(
        beta, support)
    scale = float(jnp.max(jnp.abs(dense.value)))
    assert float(jnp.max(jnp.abs(sparse - dense.value))) <= 1e-6 * scale
    # a support that misses a non-zero of beta changes the gradient (the path reads only it)
    partial = model.clipped_gradient(beta, data, 1.0, "linf", support=support[:2]).value
    assert float(jnp.max(jnp.abs(partial - dense.value))) > 1e-3
    if design == "uniform":
        with pytest.raises(ValueError, match="support= needs norm='linf'"):
            model.clipped_gradient(beta, data, 1.0, "l2", support=support)


def test_algorithm5_start_keeps_s_entries():
    """Algorithm 5 relies on s-sparse iterates: a denser start keeps its s largest entries."""
    from dpjax.algorithms import dp_glm

    est = dp_glm.noisy_iht(GLM(), 2, 3)
    state = est.init(jnp.array([0.1, -3.0, 0.2, 2.0]))
    assert bool((state.beta == jnp.array([0.0, -3.0, 0.0, 2.0])).all())
