"""mage_jax: JAX/Flax training of the Mage-VL-Cowork hybrid computer-use agent."""
