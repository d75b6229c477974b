"""StructXLIP's lexicon filter: visual-appearance words removed from a caption (``frameworks.md`` §3.2).

The lexicons below are data (word lists), taken as facts from intelligolabs/StructXLIP
``structxlip/text_filters.py`` @bd63274 (``DEFAULT_VOCAB``: colours, materials, textures, insect terms; and
its stop-word list). The filtering code is our own, to the behaviour the spec describes: each chosen
lexicon's phrases are removed as whole words (case-insensitive, longest phrase first, a space inside a
phrase matching any run of whitespace), whitespace and punctuation are repaired, and the original caption
is kept when fewer than ``min_content_words`` non-stop-words would remain.

UNVERIFIED (spec §3.2): that the paper's filter is this one (a paper summary speaks of POS tagging and
dependency parsing, which the released code does not do).
"""

from __future__ import annotations

import re
from functools import lru_cache

from hnbench.train.objective_options import FilterOptions

__all__ = ["LEXICONS", "STOPWORDS", "FilterOptions", "filter_caption"]

DEFAULTS = FilterOptions()  # the default options of the functions below

COLORS = (
    "red blue green yellow black white gray grey orange purple pink brown beige cyan magenta turquoise teal "
    "maroon navy violet indigo gold silver ivory cream olive tan peach mint burgundy crimson scarlet lavender "
    "lilac azure aqua aquamarine").split() + [
    "navy blue", "sky blue", "baby blue", "light blue", "dark blue", "light green", "dark green", "forest green",
    "lime green", "light red", "dark red", "rose red", "wine red", "light pink", "hot pink", "dark gray",
    "light gray", "dark grey", "light grey"]
MATERIALS = (
    "cotton wool silk linen denim leather suede velvet satin chiffon polyester nylon spandex acrylic rayon "
    "cashmere fleece corduroy lace mesh canvas tweed felt rubber plastic metal steel iron aluminum bronze brass "
    "ceramic glass wood bamboo stone marble granite concrete clay paper fur shearling down feather foam").split()
TEXTURES = (
    "smooth rough soft hard glossy matte shiny dull coarse fine grainy fuzzy fluffy silky velvety wrinkled "
    "crumpled woven knit striped plaid checkered dotted spotted paisley floral camouflage camo herringbone "
    "chevron geometric abstract ombre gradient marbled transparent translucent opaque frosted sheer "
    "netted").split() + ["polka dot", "animal print", "zebra print", "leopard print", "snake print", "tie dye"]
INSECT_TERMS = (
    "black brown tan beige cream white gray grey charcoal slate ash red reddish orange yellow green blue purple "
    "pink magenta violet rust russet chestnut mahogany ochre umber sienna tawny fawn amber golden bronze coppery "
    "pale dusky faded drab rufous testaceous fulvous ferruginous castaneous fuscous livid piceous violaceous "
    "cyaneous glaucous mottled blotchy flecked stained tinged tinted smudged clouded diffuse suffused melanized "
    "depigmented discolored frosted pruinose powdery mealy chalky dusty granular velvety shaded darkened "
    "lightened somber sooty smoky iridescent metallic submetallic opalescent pearlescent prismatic lustrous "
    "holographic glossy subglossy matte satiny silky polished reflective transparent translucent opaque hyaline "
    "subhyaline earthy vivid bright silken glassy resinous waxy glistening gleaming").split() + [
    "dark brown", "light brown", "off white", "non reflective", "semi translucent", "smoky hyaline", "warm toned",
    "cool toned", "dark colored"]
LEXICONS: dict[str, tuple[str, ...]] = {"insect": tuple(INSECT_TERMS), "colors": tuple(COLORS),
                                        "materials": tuple(MATERIALS), "textures": tuple(TEXTURES)}
STOPWORDS = frozenset("a an and are as at be by for from in is it of on or that the to with".split())


@lru_cache(maxsize=8)
def _pattern(name: str) -> re.Pattern[str]:
    phrases = sorted({p.lower() for p in LEXICONS[name]}, key=lambda p: (-len(p), p))
    body = "|".join(r"\s+".join(re.escape(w) for w in p.split()) for p in phrases)
    return re.compile(rf"\b(?:{body})\b", re.IGNORECASE)


def _tidy(text: str) -> str:
    """One space between words, none before a punctuation mark, a repeated mark (or a run of commas left by
    removed words) once, no space at the ends."""
    text = " ".join(text.split())
    text = re.sub(r" (?=[,.;:!?])", "", text)
    text = re.sub(r"([,.;:!?])\1+", r"\1", text)
    return re.sub(r",(?: ?,)+", ",", text).strip()


def filter_caption(caption: str, options: FilterOptions = DEFAULTS) -> str:
    """``caption`` with the chosen lexicons' phrases removed (in the order insect, colours, materials,
    textures, as ``VisualTermFilter.filter_text``), tidied; the tidied original when too few content words
    remain."""
    original = _tidy(caption)
    chosen = {"insect": options.filter_insect, "colors": options.filter_colors,
              "materials": options.filter_materials, "textures": options.filter_textures}
    cleaned = original
    for name, on in chosen.items():
        if on:
            cleaned = _pattern(name).sub(" ", cleaned)
    cleaned = _tidy(cleaned)
    content = [w for w in re.findall(r"\b\w+\b", cleaned.lower()) if w not in STOPWORDS]
    return cleaned if len(content) >= options.filter_min_words else original
