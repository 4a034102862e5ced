"""Word lists the meaning signature and the guards read (English).

General lexical knowledge, not tuned to any data set: negators, antonym pairs, the negating
prefixes, preposition classes, unit names and number words. Every entry is lower-case and, for
inflected words, in the lemma form spaCy's English lemmatizer produces ("larger" → "large",
"better" → "well"/"good", "worst" → "bad").
"""

from __future__ import annotations

# Words that negate the clause they sit in (spaCy marks "not", "n't" and "never" with the `neg`
# dependency; the others are determiners, pronouns or adverbs).
NEGATORS = frozenset(
    {
        "not",
        "n't",
        "never",
        "no",
        "none",
        "nothing",
        "nobody",
        "noone",
        "nowhere",
        "neither",
        "nor",
        "non",
        "cannot",
        # adjectives that mean "not able" ("Why am I unable to log in?" = "Why can't I log in?")
        "unable",
        "impossible",
    }
)

# Prefixes that turn a word into its opposite ("safe" / "unsafe", "like" / "dislike"). They only
# count when the other text holds the bare word, so "display" never reads as "not play" unless
# the other question says "play".
NEGATING_PREFIXES = ("un", "in", "im", "il", "ir", "dis", "non", "non-", "de", "anti", "mis")
MIN_PREFIX_BASE_CHARS = 3

# Opposites: each line is a word and the words that contradict it (never its synonyms: "reduce"
# and "lower" both oppose "increase" but not each other). Co-ordinate terms an embedding cannot
# tell apart ("man" / "woman", "north" / "south") count as opposites too.
_OPPOSITES: tuple[tuple[str, str], ...] = (
    # actions and their reversals
    ("enable", "disable"),
    ("activate", "deactivate"),
    ("increase", "decrease reduce lower cut drop fall decline"),
    ("gain", "lose loss"),
    ("raise", "lower low"),
    ("rise", "fall drop"),
    ("grow", "shrink"),
    ("expand", "collapse shrink"),
    ("buy", "sell"),
    ("buyer", "seller"),
    ("purchase", "sell sale"),
    ("import", "export"),
    ("upload", "download"),
    ("upgrade", "downgrade"),
    ("add", "remove delete subtract"),
    ("insert", "delete remove"),
    ("create", "delete destroy"),
    ("install", "uninstall remove"),
    ("include", "exclude"),
    ("inclusive", "exclusive"),
    ("accept", "reject decline refuse"),
    ("allow", "forbid prohibit deny block ban"),
    ("approve", "deny reject"),
    ("open", "close shut"),
    ("start", "stop end finish"),
    ("begin", "end finish"),
    ("push", "pull"),
    ("send", "receive"),
    ("give", "receive"),
    ("borrow", "lend"),
    ("deposit", "withdraw withdrawal"),
    ("credit", "debit"),
    ("income", "expense"),
    ("profit", "loss"),
    ("benefit", "risk danger harm drawback disadvantage"),
    ("advantage", "drawback risk"),
    ("asset", "liability"),
    ("win", "lose loss"),
    ("pass", "fail"),
    ("succeed", "fail"),
    ("success", "failure"),
    ("attack", "defend"),
    ("arrive", "depart leave"),
    ("arrival", "departure"),
    ("enter", "exit leave"),
    ("entry", "exit"),
    ("join", "leave quit"),
    ("hire", "fire"),
    ("employer", "employee"),
    ("teacher", "student"),
    ("parent", "child"),
    ("remember", "forget"),
    ("love", "hate"),
    ("show", "hide"),
    ("appear", "disappear"),
    ("encode", "decode"),
    ("encrypt", "decrypt"),
    ("compress", "decompress extract"),
    ("zip", "unzip"),
    ("lock", "unlock"),
    ("mount", "unmount"),
    ("mute", "unmute"),
    ("freeze", "unfreeze thaw"),
    ("attach", "detach"),
    ("connect", "disconnect"),
    ("subscribe", "unsubscribe"),
    ("follow", "unfollow"),
    ("block", "unblock"),
    ("maximize", "minimize"),
    ("maximum", "minimum"),
    ("max", "min"),
    ("multiply", "divide"),
    ("plus", "minus"),
    ("ascend", "descend"),
    ("ascending", "descending"),
    ("agree", "disagree"),
    ("input", "output"),
    ("inbound", "outbound"),
    ("incoming", "outgoing"),
    ("inflow", "outflow"),
    ("serialize", "deserialize"),
    ("uppercase", "lowercase"),
    ("upper", "lower"),
    # properties
    ("large", "small little tiny"),
    ("big", "small little tiny"),
    ("huge", "small tiny"),
    ("long", "short"),
    ("tall", "short"),
    ("high", "low"),
    ("wide", "narrow"),
    ("thick", "thin"),
    ("heavy", "light"),
    ("fast", "slow slowly"),
    ("quick", "slow slowly"),
    ("quickly", "slowly slow"),
    ("early", "late"),
    ("hot", "cold cool"),
    ("warm", "cold cool"),
    ("wet", "dry"),
    ("hard", "soft easy"),
    ("difficult", "easy"),
    ("cheap", "expensive"),
    ("rich", "poor"),
    ("strong", "weak"),
    ("good", "bad poor"),
    ("well", "badly poorly"),
    ("right", "wrong"),
    ("true", "false"),
    ("positive", "negative"),
    ("safe", "dangerous harmful risky"),
    ("healthy", "harmful"),
    ("same", "different"),
    ("similar", "different"),
    ("old", "new young"),
    ("modern", "ancient"),
    ("first", "last"),
    ("next", "last previous"),
    ("most", "least"),
    ("more", "less fewer"),
    ("many", "few"),
    ("all", "some none"),
    ("some", "none"),
    ("always", "sometimes never rarely"),
    ("often", "rarely seldom never"),
    ("everyone", "someone nobody"),
    ("someone", "nobody"),
    ("everything", "something nothing"),
    ("something", "nothing"),
    ("public", "private"),
    ("permanent", "temporary"),
    ("active", "passive inactive"),
    ("present", "absent"),
    ("vertical", "horizontal"),
    ("internal", "external"),
    ("inner", "outer"),
    ("odd", "even"),
    ("light", "dark"),
    ("black", "white"),
    ("happy", "sad"),
    ("alive", "dead"),
    ("live", "die"),
    ("bear", "die"),  # "born" lemmatizes to "bear"
    ("birth", "death"),
    ("acidic", "alkaline basic"),
    ("male", "female"),
    ("man", "woman"),
    ("boy", "girl"),
    ("husband", "wife"),
    ("father", "mother"),
    ("son", "daughter"),
    ("brother", "sister"),
    ("king", "queen"),
    ("day", "night"),
    ("morning", "evening night afternoon"),
    ("afternoon", "evening night"),
    ("evening", "night"),
    ("summer", "winter"),
    ("spring", "autumn fall"),
    ("sunrise", "sunset"),
    ("past", "future"),
    ("yesterday", "today tomorrow"),
    ("today", "tomorrow"),
    ("north", "south"),
    ("east", "west"),
    ("northern", "southern"),
    ("eastern", "western"),
    ("left", "right"),
    ("top", "bottom"),
    ("front", "back rear"),
    ("inside", "outside"),
    ("indoor", "outdoor"),
    ("domestic", "international foreign"),
    # particles and prepositions whose swap reverses an action ("turn on" / "turn off")
    ("on", "off"),
    ("in", "out"),
    ("up", "down"),
    ("into", "out"),
    ("before", "after"),
    ("above", "below"),
    ("over", "under"),
    ("with", "without"),
    ("for", "against"),
    ("pro", "con"),
)

ANTONYMS: frozenset[tuple[str, str]] = frozenset(
    pair
    for word, opposites in _OPPOSITES
    for other in opposites.split()
    for pair in ((word, other), (other, word))
)
ANTONYM_WORDS = frozenset(w for pair in ANTONYMS for w in pair)

# Function words that are particles or prepositions in the antonym table. They count only when
# used as particles or adverbs ("turn *off*", "log *in*"), not when heading a noun phrase.
PARTICLE_ANTONYMS = frozenset({"on", "off", "in", "out", "up", "down", "into"})

# Prepositions grouped by the relation they express, so "convert X to Y" and "convert X into Y"
# give Y the same role while "from X" and "to X" stay different.
_PREPOSITION_CLASSES: dict[str, tuple[str, ...]] = {
    "source": ("from", "out", "off"),
    "goal": ("to", "into", "towards", "toward", "onto", "unto", "till", "until"),
    "place": ("in", "at", "on", "inside", "within", "among", "amongst"),
    "topic": ("about", "regarding", "concerning", "re"),
    "comparison": ("than", "versus", "vs", "vs."),
}
PREPOSITION_CLASS: dict[str, str] = {
    word: name for name, words in _PREPOSITION_CLASSES.items() for word in words
}

# Prepositions: the anchors a phrase keeps when it moves ("from Paris" moves as one).
# "vs" and "versus" join symmetric items instead; "out" and "off" are mostly particles.
PREPOSITIONS = frozenset(
    {
        *("from", "to", "into", "onto", "towards", "toward", "until", "till", "in", "at", "on"),
        *("inside", "within", "among", "about", "regarding", "concerning", "than", "by", "for"),
        *("with", "through", "via", "of", "over", "under", "between", "after", "before"),
        *("during", "since", "across", "along", "around", "against", "without", "near"),
        *("behind", "beyond", "above", "below", "beside", "outside", "upon", "per"),
    }
)

# Canonical units: every spelling on the left means the unit on the right.
_UNIT_SPELLINGS: dict[str, tuple[str, ...]] = {
    "km": ("km", "kms", "kilometer", "kilometre", "klick"),
    "m": ("m", "meter", "metre", "mtr"),
    "cm": ("cm", "centimeter", "centimetre"),
    "mm": ("mm", "millimeter", "millimetre"),
    "mi": ("mi", "mile"),
    "ft": ("ft", "foot", "feet"),
    "inch": ("inch", "inche", "inches"),
    "yd": ("yd", "yard"),
    "kg": ("kg", "kgs", "kilo", "kilogram", "kilogramme"),
    "g": ("g", "gram", "gramme", "gm"),
    "mg": ("mg", "milligram"),
    "lb": ("lb", "lbs", "pound"),
    "oz": ("oz", "ounce"),
    "l": ("l", "liter", "litre", "ltr"),
    "ml": ("ml", "milliliter", "millilitre"),
    "gal": ("gal", "gallon"),
    "h": ("h", "hr", "hrs", "hour"),
    "min": ("min", "mins", "minute"),
    "s": ("s", "sec", "secs", "second"),
    "ms": ("ms", "millisecond"),
    "day": ("day", "days"),
    "week": ("week", "wk"),
    "month": ("month", "mo"),
    "year": ("year", "yr", "yrs"),
    "am": ("am", "a.m.", "a.m"),
    "pm": ("pm", "p.m.", "p.m"),
    "°c": ("°c", "c", "celsius", "centigrade"),
    "°f": ("°f", "f", "fahrenheit"),
    "usd": ("usd", "$", "dollar", "buck", "us$"),
    "eur": ("eur", "€", "euro"),
    "gbp": ("gbp", "£", "sterling"),
    "jpy": ("jpy", "¥", "yen"),
    "inr": ("inr", "₹", "rupee", "rs", "rs."),
    "%": ("%", "percent", "pct", "percentage"),
    "kb": ("kb", "kilobyte"),
    "mb": ("mb", "megabyte"),
    "gb": ("gb", "gigabyte", "gig"),
    "tb": ("tb", "terabyte"),
    "mph": ("mph",),
    "kmh": ("kmh", "kph", "km/h"),
    "cal": ("cal", "calorie", "kcal"),
}
UNIT_ALIASES: dict[str, str] = {
    spelling: unit for unit, spellings in _UNIT_SPELLINGS.items() for spelling in spellings
}
CURRENCY_SYMBOLS = frozenset({"$", "€", "£", "¥", "₹", "us$"})

NUMBER_WORDS: dict[str, int] = {
    "zero": 0,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "thirteen": 13,
    "fourteen": 14,
    "fifteen": 15,
    "sixteen": 16,
    "seventeen": 17,
    "eighteen": 18,
    "nineteen": 19,
    "twenty": 20,
    "thirty": 30,
    "forty": 40,
    "fifty": 50,
    "sixty": 60,
    "seventy": 70,
    "eighty": 80,
    "ninety": 90,
    "dozen": 12,
}
SCALE_WORDS: dict[str, int] = {
    "hundred": 100,
    "thousand": 1_000,
    "million": 1_000_000,
    "mn": 1_000_000,
    "billion": 1_000_000_000,
    "bn": 1_000_000_000,
    "trillion": 1_000_000_000_000,
}
ORDINAL_WORDS: dict[str, int] = {
    "first": 1,
    "second": 2,
    "third": 3,
    "fourth": 4,
    "fifth": 5,
    "sixth": 6,
    "seventh": 7,
    "eighth": 8,
    "ninth": 9,
    "tenth": 10,
    "eleventh": 11,
    "twelfth": 12,
    "twentieth": 20,
    "hundredth": 100,
}
FRACTION_WORDS: dict[str, str] = {"half": "0.5", "quarter": "0.25", "third": "0.333"}
# Words an arithmetic question spells out instead of using a symbol.
OPERATOR_WORDS: dict[str, str] = {
    "plus": "+",
    "minus": "-",
    "times": "*",
    "multiply": "*",
    "divide": "/",
    "over": "/",
    "×": "*",
    "÷": "/",
    "x": "*",
}
OPERATOR_SYMBOLS = frozenset({"+", "-", "*", "/", "^", "=", "<", ">", "≤", "≥", "×", "÷", "%"})

# Interrogatives by the kind of answer they ask for. "what" and "which" ask for anything, so
# they never conflict with another kind ("What is the way to…" / "How do I…").
WH_ANSWER_KIND: dict[str, str] = {
    "who": "person",
    "whom": "person",
    "whose": "person",
    "when": "time",
    "where": "place",
    "why": "reason",
    "how": "manner",
}
# "how" + one of these asks for a quantity, not a manner.
HOW_QUANTITY = frozenset(
    {"many", "much", "long", "far", "old", "big", "large", "tall", "often", "high", "fast", "soon"}
    # Measurable degrees: "How hot / deep / expensive is X?" asks what "What temperature /
    # depth / price is X?" and "How much does X cost?" ask. ("How good is X?" still asks how X
    # is, as "How's X?" does.)
    | {"hot", "cold", "warm", "deep", "wide", "heavy", "expensive", "cheap", "costly", "thick"}
    | {"short", "small", "low", "loud", "bright", "early", "late", "quickly"}
)

# Verbs whose negation reaches the verb they take as a complement: "I can't *seem* to use my
# card" and "I can't *get* my card to work" deny using and working; "I don't *know* how to
# activate it" and "I don't *want* to verify" do not deny activating or verifying.
NEGATION_TRANSPARENT_VERBS = frozenset({"seem", "appear", "get", "manage", "happen", "able"})

# Joins a negated word to the words its negation reaches (`Analysis.signature.negated`).
NEGATION_SCOPE_JOINER = ">"

# Modal verbs that do not change what a "how" question asks ("How do I…" / "How can I…").
MANNER_NEUTRAL_AUX = frozenset({"do", "can", "could"})
