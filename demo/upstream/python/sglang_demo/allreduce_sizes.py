"""Largest all-reduce message, per GPU, by compute capability major and world size."""

MiB = 1024 * 1024

MAX_SIZES = {
    9: {2: 64 * MiB, 4: 64 * MiB, 6: 128 * MiB, 8: 128 * MiB},
    10: {2: 64 * MiB, 4: 64 * MiB, 6: 128 * MiB, 8: 128 * MiB},
}


def max_size(capability_major, world_size):
    """Raises KeyError on a GPU generation missing from the table."""
    return MAX_SIZES[capability_major][world_size]
