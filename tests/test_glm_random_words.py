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
