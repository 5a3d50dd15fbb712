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
