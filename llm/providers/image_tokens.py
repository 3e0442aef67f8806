"""How many input tokens an image costs, from its width and height alone: a provable
upper bound, so a hold can be sized before the image is downloaded (Telegram gives
every photo size's ``width`` and ``height`` in the message).

Both formulas are the providers' own preprocessing, read from the reference code that
the documentation points to; each function returns that count where it follows from the
sides alone, and otherwise the most it can be (``ceil`` where the reference rounds; 16
tiles where Llama 4 scales a large image down onto a canvas of at most 16).

**Llama 4 (Groq's** ``meta-llama/llama-4-scout-17b-16e-instruct`` **)** — Hugging Face
``transformers`` ``models/llama4``: the image processor fits the image on a canvas of
336×336-pixel tiles (``size`` 336, ``max_patches`` 16: at most 16 tiles), choosing the
canvas that needs the least upscaling, which for an image of ``h × w`` pixels is
``ceil(h/336) × ceil(w/336)`` tiles whenever that is at most 16 (any other canvas that
fits without downscaling has at least as many rows and columns), and at most 16
otherwise (``image_processing_llama4_fast.get_best_fit``; it then picks the canvas
that shrinks the image least, which can be fewer tiles: 673×1681 gets 15, so 16 is a
bound there, never an undercount). The processor
(``processing_llama4.Llama4Processor._prompt_split_image``) writes per image
``<|image_start|>``, then — only when there is more than one tile — each tile's 144
patch tokens (336/14 = 24 patches a side, 24² = 576, pixel-shuffle ratio 0.5 → 576/4)
followed by one separator token, then ``<|image|>``, 144 patch tokens for the global
thumbnail and ``<|image_end|>``: 147 tokens for one tile, ``145 × tiles + 147`` for
more. Largest: 16 tiles, 2,467 tokens. Observed on Groq (pydantic-ai cassettes,
``tests/fixtures/media/providers/``): one photo + a short question billed 749 prompt
tokens (4 tiles = 727, plus the text), a 3008×2000 PNG 2,344 (15 tiles = 2,322).

**Mistral (Mistral Small 3.1/3.2, Medium 3, Pixtral)** — ``mistral-common``
``tokens/tokenizers/image.py`` ``ImageEncoder._image_to_num_tokens``: an image larger
than ``max_image_size`` on either side is scaled down to fit (aspect kept); it is then
cut into squares of ``image_patch_size × spatial_merge_size`` pixels, one token each,
plus one ``[IMG_BREAK]`` per row (the last row's is ``[IMG_END]``): ``rows × (cols + 1)``
tokens. Mistral's vision documentation (docs.mistral.ai/capabilities/vision, FAQ, table
"Max Resolution / ≈ Formula") gives 1540×1540 and ``≈ (X × Y) / 784`` (28×28-pixel
squares: patch 14, merge 2) for Mistral Small 3.1/3.2 and Medium 3 — at most 55 × 56 =
3,080 tokens — and 1024×1024, ``/ 256`` (16×16, no merge) for Pixtral 12B/Large — at
most 64 × 65 = 4,160.
"""

from __future__ import annotations

import math

__all__ = [
    "LLAMA4_MAX_TILES",
    "LLAMA4_TILE_PIXELS",
    "MISTRAL_MAX_SIDE",
    "MISTRAL_SQUARE_PIXELS",
    "PIXTRAL_MAX_SIDE",
    "PIXTRAL_SQUARE_PIXELS",
    "llama4_image_tokens",
    "mistral_image_tokens",
]

#: Llama 4's tile side, pixels (``Llama4ImageProcessorFast.size``).
LLAMA4_TILE_PIXELS = 336
#: Llama 4's most tiles per image (``max_patches``).
LLAMA4_MAX_TILES = 16
#: Patch tokens per Llama 4 tile: (336 / 14)² / 4.
LLAMA4_TOKENS_PER_TILE = 144

#: Mistral Small 3.x / Medium 3: the longest side kept and the pixels per token side.
MISTRAL_MAX_SIDE = 1540
MISTRAL_SQUARE_PIXELS = 28
#: Pixtral 12B / Large.
PIXTRAL_MAX_SIDE = 1024
PIXTRAL_SQUARE_PIXELS = 16


def _check(width: int, height: int) -> None:
    if width < 1 or height < 1:
        raise ValueError(f"an image has positive sides, not {width}x{height}")


def llama4_image_tokens(
    width: int, height: int, *, tile: int = LLAMA4_TILE_PIXELS, max_tiles: int = LLAMA4_MAX_TILES
) -> int:
    """Prompt tokens of one image for Llama 4 (see the module docstring).

    Args:
        width: pixels.
        height: pixels.
        tile: the tile side, pixels.
        max_tiles: the most tiles one image is cut into.

    Returns:
        Tokens: 147 for an image that fits one tile, ``145 × tiles + 147`` otherwise —
        exact when ``ceil(w/336) × ceil(h/336) ≤ 16``, the 16-tile bound above that;
        at most 2,467 with the defaults.

    Raises:
        ValueError: a side below 1 pixel.
    """
    _check(width, height)
    tiles = min(max_tiles, math.ceil(width / tile) * math.ceil(height / tile))
    single = 1 + 1 + LLAMA4_TOKENS_PER_TILE + 1  # image_start, image, thumbnail, image_end
    if tiles <= 1:
        return single
    return tiles * (LLAMA4_TOKENS_PER_TILE + 1) + single


def mistral_image_tokens(
    width: int,
    height: int,
    *,
    max_side: int = MISTRAL_MAX_SIDE,
    square: int = MISTRAL_SQUARE_PIXELS,
) -> int:
    """Prompt tokens of one image for Mistral's vision models (see the module docstring).

    Args:
        width: pixels.
        height: pixels.
        max_side: the longest side the model keeps (larger images are scaled down).
        square: pixels per token side (``image_patch_size × spatial_merge_size``).

    Returns:
        ``rows × (cols + 1)`` tokens; at most 3,080 with the defaults (Mistral Small
        3.x, Medium 3), 4,160 with Pixtral's 1024/16.

    Raises:
        ValueError: a side below 1 pixel.
    """
    _check(width, height)
    ratio = max(width / max_side, height / max_side)
    if ratio > 1:  # the reference rounds; ceil is never smaller, and stays <= max_side
        width = min(max_side, math.ceil(width / ratio))
        height = min(max_side, math.ceil(height / ratio))
    cols = math.ceil(width / square)
    rows = math.ceil(height / square)
    return rows * (cols + 1)
