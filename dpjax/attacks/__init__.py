"""Privacy attacks: membership inference (`mia`), reconstruction (`reconstruction`) and
exact floating-point attacks on float32 noise (`floating_point`)."""

__all__ = ("floating_point", "mia", "reconstruction")
