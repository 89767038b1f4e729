"""Checks that a PNG is a real picture: its size, and content that is more than a blank
canvas (many distinct colours: lines, markers, anti-aliased text)."""

from __future__ import annotations

import struct
from pathlib import Path

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from the PNG's IHDR chunk."""
    head = path.read_bytes()[:24]
    assert head[:8] == PNG_SIGNATURE, f"{path} is not a PNG"
    width, height = struct.unpack(">II", head[16:24])
    return int(width), int(height)


def assert_rich_png(path: Path, size: tuple[int, int], min_colours: int = 50) -> None:
    """`path` is a PNG of exactly `size` pixels with at least `min_colours` distinct colours
    and ink on more than 2% of it."""
    import numpy as np
    from matplotlib import image

    assert png_size(path) == size
    pixels = image.imread(str(path))[..., :3]
    colours = np.unique((pixels * 255).astype(np.uint8).reshape(-1, 3), axis=0)
    assert len(colours) >= min_colours, f"{path}: only {len(colours)} colours"
    ink = np.mean(np.any(pixels < 0.9, axis=-1))
    assert ink > 0.02, f"{path}: {ink:.1%} of it is not near-white"
