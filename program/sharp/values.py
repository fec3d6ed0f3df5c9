"""Values read for the entities of a question, parsed and compared in code.

The 1.5B reader reads a date or a number well and compares two of them badly ("who was born earlier"
answered with the other entity). So a comparison's values are read one entity at a time (program/sharp/loop.py)
and decided here, with no LM call:

* :func:`parse_value` reads a value as a date (``python-dateutil``, at the precision it states: a year, a
  month or a day), a number (with its multiplier and unit word), a yes/no, or plain text.
* :func:`comparison_cue` reads from the question which way it compares: the earlier or the later date
  ("born first", "more recently"), the larger or the smaller amount ("more species", "shorter").
* :func:`decide` picks the option (a choice question: "Which film came out first, A or B?"), or answers a
  yes/no question from the values ("both ...": all yes; "either": any; "the same nationality": equal
  values; "Was A born before B?": the comparison), or says why it cannot (then the LM composes the answer
  from the values, and the trace says so).
"""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from program.reading.answers import is_yes_no_question

Kind = Literal["date", "number", "yesno", "text", "none"]


@dataclass(frozen=True)
class Value:
    """A read value, parsed: ``kind`` and, for a date, ``(year, month, day)`` with ``precision`` (1: year,
    2: month, 3: day); for a number, ``number`` and its ``unit`` word ("" when none)."""

    text: str
    kind: Kind
    date: tuple[int, int, int] | None = None
    precision: int = 0
    number: float | None = None
    unit: str = ""


_NONE = {"", "unknown", "none", "n/a", "not mentioned", "not found", "not available", "not specified"}
_YEAR = re.compile(r"^(?:c\.|ca\.|circa|around|about|in)?\s*(?:(\d{4})|(\d{1,4})\s*(bc|bce|ad|ce))$", re.I)
_YEAR_LEAD = re.compile(
    r"^(1\d{3}|20\d{2})\s+(?!species|people|members|students|inhabitants|residents|km|miles|m\b)[a-z]", re.I
)
_HAS_MONTH = re.compile(r"\b(jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\.?\b", re.I)
_NUMBER = re.compile(r"(-?\d[\d,]*(?:\.\d+)?)\s*(thousand|million|billion|trillion|k|m|bn)?\b\s*([a-z%°]+)?", re.I)
_MULTIPLIER = {"thousand": 1e3, "k": 1e3, "million": 1e6, "m": 1e6, "billion": 1e9, "bn": 1e9, "trillion": 1e12}
_AMOUNT_START = re.compile(r"^(about|around|approximately|over|nearly|almost|more than|less than|some)?\s*-?\d")
_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10,
          "eleven": 11, "twelve": 12}  # fmt: skip


def parse_date(text: str) -> tuple[tuple[int, int, int], int] | None:
    """``((year, month, day), precision)`` of a date written in ``text`` ("22 October 1912", "November
    1902", "1954", "c. 1900", "44 BC", "1992 American film"), or None. A bare number is a year only with
    four digits, or with an era (BC, AD)."""
    t = " ".join(str(text).replace(",", " ").split()).strip(" .")
    m = _YEAR.match(t) or _YEAR_LEAD.match(t)
    if m and m.re is _YEAR_LEAD:  # "1992 American film": the year it starts with
        return ((int(m.group(1)), 1, 1), 1)
    if m:
        year = int(m.group(1) or m.group(2))
        return ((-year if (m.group(3) or "").lower() in ("bc", "bce") else year, 1, 1), 1)
    if not _HAS_MONTH.search(t) or not re.search(r"\d{3,4}", t):
        return None
    from dateutil import parser  # python-dateutil: the parse of a written date

    try:
        first = parser.parse(t, fuzzy=True, default=_dt.datetime(1, 1, 1))
        second = parser.parse(t, fuzzy=True, default=_dt.datetime(2, 2, 2))
    except (ValueError, OverflowError):
        return None
    if first.year != second.year:  # no year written
        return None
    precision = 3 if first.day == second.day else 2 if first.month == second.month else 1
    return (first.year, first.month if precision >= 2 else 1, first.day if precision == 3 else 1), precision


def parse_number(text: str) -> tuple[float, str] | None:
    """``(number, unit)`` of the first amount in ``text`` ("3,500 km" -> (3500.0, "km"), "1.2 million" ->
    (1200000.0, ""), "twelve species" -> (12.0, "species")), or None."""
    t = str(text).strip().lower()
    words = t.split()
    if words and words[0] in _WORDS:
        return float(_WORDS[words[0]]), (words[1] if len(words) > 1 else "")
    m = _NUMBER.search(t)
    if not m:
        return None
    try:
        number = float(m.group(1).replace(",", ""))
    except ValueError:
        return None
    mult = (m.group(2) or "").lower()
    unit = (m.group(3) or "").lower()
    if mult == "m" and unit:  # "5 m" is five metres, not five million
        unit, mult = "m", ""
    return number * _MULTIPLIER.get(mult, 1.0), unit


def parse_value(text: str | None) -> Value:
    """A read value as a :class:`Value` (kind ``none`` when nothing was read)."""
    t = " ".join(str(text or "").split()).strip(" .\"'")
    low = t.lower()
    if low in _NONE:
        return Value(t, "none")
    if low in ("yes", "no", "true", "false"):
        return Value(t, "yesno")
    found = parse_date(t)
    if found:
        return Value(t, "date", date=found[0], precision=found[1])
    number = parse_number(t)
    if number and (_AMOUNT_START.match(low) or low.split()[0] in _WORDS):
        return Value(t, "number", number=number[0], unit=number[1])
    return Value(t, "text")


# ---- which way the question compares ------------------------------------------------------------------
Direction = Literal["min", "max"]


@dataclass(frozen=True)
class Cue:
    """How a question compares: ``direction`` of the winning value ("min": the earlier date or the smaller
    amount) and the ``word`` that says so; ``age`` words ("older", "younger") flip for numbers (an age)."""

    direction: Direction
    word: str
    age: bool = False


_CUES: tuple[tuple[str, Direction, bool], ...] = (
    (r"more recently|most recently|later|latest|last|after|newer|newest", "max", False),
    (r"first|earlier|earliest|before|sooner|prior", "min", False),
    (r"older|oldest|elder", "min", True),
    (r"younger|youngest", "max", True),
    (r"fewer|fewest|less|least|smaller|smallest|lower|lowest|shorter|shortest|lighter|lesser", "min", False),
    (r"more|most|larger|largest|bigger|biggest|greater|greatest|higher|highest|taller|tallest|longer|longest|"
     r"heavier|heaviest|wider|widest|deeper|deepest|populous", "max", False),
)  # fmt: skip


def comparison_cue(question: str, options: Sequence[str] = ()) -> Cue | None:
    """The first comparative word of ``question`` (its options' own words aside), or None."""
    text = f" {question.lower()} "
    for opt in options:
        if opt.strip():
            text = re.sub(rf"(?<!\w){re.escape(opt.lower().strip())}(?!\w)", " ", text)
    best: tuple[int, Cue] | None = None
    for pattern, direction, age in _CUES:
        m = re.search(rf"\b({pattern})\b", text)
        if m and (best is None or m.start() < best[0]):
            best = (m.start(), Cue(direction, m.group(1), age))
    return best[1] if best else None


# ---- deciding -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Decision:
    """What code made of the values: the ``answer`` (None: code cannot decide, the LM composes) and ``why``."""

    answer: str | None
    why: str


def _winner(values: Sequence[Value], cue: Cue) -> int | None:
    """The index of the value the cue picks, or None (values of other kinds, unparsed, or tied)."""
    kinds = {v.kind for v in values}
    if kinds == {"date", "number"} and all(v.precision == 1 for v in values if v.kind == "date"):
        values = [Value(v.text, "number", number=float(v.date[0])) if v.kind == "date" else v for v in values]  # type: ignore[index]
        kinds = {"number"}
    if kinds == {"date"}:
        precision = min(v.precision for v in values)
        keys = [v.date[:precision] for v in values]  # type: ignore[index]
        direction = cue.direction
    elif kinds == {"number"}:
        units = {v.unit for v in values if v.unit}
        if len(units) > 1:
            return None
        keys = [(v.number,) for v in values]
        direction = ("max" if cue.direction == "min" else "min") if cue.age else cue.direction
    else:
        return None
    target = min(keys) if direction == "min" else max(keys)
    hits = [i for i, k in enumerate(keys) if k == target]
    return hits[0] if len(hits) == 1 else None


_SAME = re.compile(r"\b(same|identical|different|share|shared|in common)\b", re.I)
_BOTH = re.compile(r"\b(both|all|each)\b", re.I)
_EITHER = re.compile(r"\b(either|any|one of)\b", re.I)
_NEITHER = re.compile(r"\b(neither|none)\b", re.I)


def decide(question: str, entities: Sequence[str], raw_values: Sequence[str | None], choice: bool) -> Decision:
    """The answer code gives from one value read per entity: for a ``choice`` question the entity whose
    value the comparison picks (or the only one read "yes"), for a yes/no question "yes"/"no" from the
    values; ``Decision(None, why)`` when the values do not decide it."""
    values = [parse_value(v) for v in raw_values]
    if len(values) < 2 or len(values) != len(entities):
        return Decision(None, f"{len(values)} value(s) for {len(entities)} entities")
    if any(v.kind == "none" for v in values):
        return Decision(None, "a value was not read")
    cue = comparison_cue(question, entities)
    kinds = {v.kind for v in values}
    if choice:
        if kinds == {"yesno"}:
            yes = [i for i, v in enumerate(values) if v.text.lower() in ("yes", "true")]
            if len(yes) == 1:
                return Decision(entities[yes[0]], "the only one read yes")
            return Decision(None, f"{len(yes)} of the options read yes")
        if cue is None:
            return Decision(None, "no comparative word in the question")
        win = _winner(values, cue)
        if win is None:
            return Decision(None, f"values {sorted(kinds)} do not compare for '{cue.word}'")
        return Decision(entities[win], f"'{cue.word}': {values[win].text} wins")
    if not is_yes_no_question(question):
        return Decision(None, "neither a choice nor a yes/no question")
    return _yes_no(question, values, cue)


def _yes_no(question: str, values: Sequence[Value], cue: Cue | None) -> Decision:
    kinds = {v.kind for v in values}
    yes = [v.text.lower() in ("yes", "true") for v in values]
    if _SAME.search(question):
        if kinds == {"yesno"}:  # "Is X in France?" twice says nothing of whether they share a country
            return Decision(None, "a question of sameness needs the values, not yes/no checks")
        keys = [_same_keys(v) for v in values]
        same = bool(set.intersection(*keys))
        differ = bool(re.search(r"\bdifferent\b", question, re.I))
        return Decision("no" if same == differ else "yes", "values equal" if same else "values differ")
    if kinds == {"yesno"}:
        if _NEITHER.search(question):
            return Decision("no" if any(yes) else "yes", "neither: none read yes" if not any(yes) else "one read yes")
        if _EITHER.search(question) or re.search(r"\bor\b", question, re.I):
            return Decision("yes" if any(yes) else "no", "either: any read yes")
        return Decision("yes" if all(yes) else "no", "both: every one read yes" if all(yes) else "one read no")
    if cue is not None:
        win = _winner(values, cue)
        if win is not None:
            return Decision(
                "yes" if win == 0 else "no", f"'{cue.word}': the first entity {'wins' if win == 0 else 'loses'}"
            )
    return Decision(None, f"values {sorted(kinds)} do not answer the yes/no question")


def _same_keys(value: Value) -> set[str]:
    """What a value names, for sameness: a date or a number, or the countries of a nationality
    ("Hungarian-American" names Hungary and the United States: it shares one with "American")."""
    if value.kind == "date":
        return {str(value.date[: value.precision])}  # type: ignore[index]
    if value.kind == "number":
        return {f"{value.number:g} {value.unit}"}
    parts = [p for p in re.split(r"\s*(?:-|/|,|&|\band\b)\s*", value.text) if p.strip()]
    return {same_place_key(p) for p in parts} or {same_place_key(value.text)}


# demonyms and other names of the countries a "same nationality / same country" question compares most: a
# country, then the names that mean it
_COUNTRY_NAMES = """
united states: american, usa, us, u s, u s a, united states of america, america
united kingdom: british, uk, u k, english, england, scottish, scotland, welsh, wales, great britain
canada: canadian
australia: australian
france: french
germany: german, west german, west germany, east german, east germany
italy: italian
spain: spanish
mexico: mexican
ireland: irish
india: indian
china: chinese
japan: japanese
south korea: korean, south korean
russia: russian
soviet union: soviet, ussr
sweden: swedish
norway: norwegian
denmark: danish
finland: finnish
netherlands: dutch, the netherlands, holland
belgium: belgian
switzerland: swiss
austria: austrian
poland: polish
czech republic: czech, czechia
hungary: hungarian
greece: greek
turkey: turkish
portugal: portuguese
brazil: brazilian
argentina: argentine, argentinian
chile: chilean
colombia: colombian
peru: peruvian
venezuela: venezuelan
cuba: cuban
egypt: egyptian
iran: iranian, persian
israel: israeli
pakistan: pakistani
bangladesh: bangladeshi
philippines: filipino, philippine
thailand: thai
vietnam: vietnamese
indonesia: indonesian
malaysia: malaysian
nigeria: nigerian
south africa: south african
kenya: kenyan
new zealand: new zealander
romania: romanian
bulgaria: bulgarian
serbia: serbian
croatia: croatian
ukraine: ukrainian
yugoslavia: yugoslav, yugoslavian
iceland: icelandic
estonia: estonian
latvia: latvian
lithuania: lithuanian
slovakia: slovak
slovenia: slovenian
georgia: georgian
armenia: armenian
lebanon: lebanese
syria: syrian
iraq: iraqi
saudi arabia: saudi
morocco: moroccan
algeria: algerian
tunisia: tunisian
ethiopia: ethiopian
ghana: ghanaian
sri lanka: sri lankan
nepal: nepalese
taiwan: taiwanese
hong kong: hong konger
singapore: singaporean
jamaica: jamaican
uruguay: uruguayan
bolivia: bolivian
ecuador: ecuadorian
paraguay: paraguayan
luxembourg: luxembourgish
monaco: monegasque
malta: maltese
cyprus: cypriot
albania: albanian
bosnia and herzegovina: bosnian
north macedonia: macedonian
"""
_COUNTRY = {
    name.strip(): country.strip()
    for country, names in (line.split(":") for line in _COUNTRY_NAMES.strip().splitlines())
    for name in names.split(",")
}


def same_place_key(text: str) -> str:
    """A nationality or country name as one key ("American", "USA", "United States" -> "united states"; "Paris,
    France" -> "france"; "American film director" -> "united states")."""

    def norm(t: str) -> str:
        t = " ".join(re.sub(r"[^\w\s]", " ", t.lower()).split())
        return re.sub(r"^(the|a|an)\s+", "", t)

    whole = norm(text)
    for key in (whole, norm(text.split(",")[-1]), " ".join(whole.split()[:2]), " ".join(whole.split()[:1])):
        if key in _COUNTRY:
            return _COUNTRY[key]
        if key in _COUNTRY.values():
            return key
    return whole
