"""The words behind written symbols: units, currencies, months, abbreviations and titles, and the
names that tell a Roman numeral from a word."""

from __future__ import annotations

from typing import Final

# unit as written -> (singular, plural). Case matters: "m" is metres, "M" is not a unit; "MB" is
# megabytes and "Mb" megabits.
UNITS: Final[dict[str, tuple[str, str]]] = {
    "km": ("kilometer", "kilometers"),
    "m": ("meter", "meters"),
    "cm": ("centimeter", "centimeters"),
    "mm": ("millimeter", "millimeters"),
    "µm": ("micrometer", "micrometers"),
    "nm": ("nanometer", "nanometers"),
    "mi": ("mile", "miles"),
    "ft": ("foot", "feet"),
    "yd": ("yard", "yards"),
    "kg": ("kilogram", "kilograms"),
    "g": ("gram", "grams"),
    "mg": ("milligram", "milligrams"),
    "lb": ("pound", "pounds"),
    "lbs": ("pound", "pounds"),
    "oz": ("ounce", "ounces"),
    "t": ("ton", "tons"),
    "L": ("liter", "liters"),
    "l": ("liter", "liters"),
    "ml": ("milliliter", "milliliters"),
    "mL": ("milliliter", "milliliters"),
    "gal": ("gallon", "gallons"),
    "tsp": ("teaspoon", "teaspoons"),
    "tbsp": ("tablespoon", "tablespoons"),
    "h": ("hour", "hours"),
    "hr": ("hour", "hours"),
    "hrs": ("hour", "hours"),
    "min": ("minute", "minutes"),
    "mins": ("minute", "minutes"),
    "s": ("second", "seconds"),
    "sec": ("second", "seconds"),
    "secs": ("second", "seconds"),
    "ms": ("millisecond", "milliseconds"),
    "µs": ("microsecond", "microseconds"),
    "ns": ("nanosecond", "nanoseconds"),
    "km/h": ("kilometer per hour", "kilometers per hour"),
    "kmh": ("kilometer per hour", "kilometers per hour"),
    "kph": ("kilometer per hour", "kilometers per hour"),
    "mph": ("mile per hour", "miles per hour"),
    "m/s": ("meter per second", "meters per second"),
    "rpm": ("revolution per minute", "revolutions per minute"),
    "B": ("byte", "bytes"),
    "KB": ("kilobyte", "kilobytes"),
    "kB": ("kilobyte", "kilobytes"),
    "MB": ("megabyte", "megabytes"),
    "GB": ("gigabyte", "gigabytes"),
    "TB": ("terabyte", "terabytes"),
    "PB": ("petabyte", "petabytes"),
    "KiB": ("kibibyte", "kibibytes"),
    "MiB": ("mebibyte", "mebibytes"),
    "GiB": ("gibibyte", "gibibytes"),
    "Kb": ("kilobit", "kilobits"),
    "Mb": ("megabit", "megabits"),
    "Gb": ("gigabit", "gigabits"),
    "kbps": ("kilobit per second", "kilobits per second"),
    "Mbps": ("megabit per second", "megabits per second"),
    "Gbps": ("gigabit per second", "gigabits per second"),
    "Hz": ("hertz", "hertz"),
    "kHz": ("kilohertz", "kilohertz"),
    "MHz": ("megahertz", "megahertz"),
    "GHz": ("gigahertz", "gigahertz"),
    "W": ("watt", "watts"),
    "kW": ("kilowatt", "kilowatts"),
    "MW": ("megawatt", "megawatts"),
    "kWh": ("kilowatt hour", "kilowatt hours"),
    "V": ("volt", "volts"),
    "mV": ("millivolt", "millivolts"),
    "A": ("amp", "amps"),
    "mA": ("milliamp", "milliamps"),
    "mAh": ("milliamp hour", "milliamp hours"),
    "kcal": ("kilocalorie", "kilocalories"),
    "cal": ("calorie", "calories"),
    "°C": ("degree Celsius", "degrees Celsius"),
    "°F": ("degree Fahrenheit", "degrees Fahrenheit"),
    "°": ("degree", "degrees"),
    "ha": ("hectare", "hectares"),
    "sq ft": ("square foot", "square feet"),
    "km²": ("square kilometer", "square kilometers"),
    "m²": ("square meter", "square meters"),
    "m³": ("cubic meter", "cubic meters"),
    "cm³": ("cubic centimeter", "cubic centimeters"),
    "px": ("pixel", "pixels"),
    "dB": ("decibel", "decibels"),
    "x": ("times", "times"),
}

# symbol or ISO code -> (major singular, major plural, minor singular, minor plural)
CURRENCIES: Final[dict[str, tuple[str, str, str, str]]] = {
    "$": ("dollar", "dollars", "cent", "cents"),
    "US$": ("dollar", "dollars", "cent", "cents"),
    "USD": ("dollar", "dollars", "cent", "cents"),
    "CAD": ("Canadian dollar", "Canadian dollars", "cent", "cents"),
    "AUD": ("Australian dollar", "Australian dollars", "cent", "cents"),
    "€": ("euro", "euros", "cent", "cents"),
    "EUR": ("euro", "euros", "cent", "cents"),
    "£": ("pound", "pounds", "penny", "pence"),
    "GBP": ("pound", "pounds", "penny", "pence"),
    "¥": ("yen", "yen", "sen", "sen"),
    "JPY": ("yen", "yen", "sen", "sen"),
    "CNY": ("yuan", "yuan", "fen", "fen"),
    "₹": ("rupee", "rupees", "paisa", "paise"),
    "INR": ("rupee", "rupees", "paisa", "paise"),
    "CHF": ("Swiss franc", "Swiss francs", "centime", "centimes"),
    "₩": ("won", "won", "jeon", "jeon"),
    "KRW": ("won", "won", "jeon", "jeon"),
    "₽": ("ruble", "rubles", "kopek", "kopeks"),
    "BTC": ("bitcoin", "bitcoin", "satoshi", "satoshis"),
}

MAGNITUDES: Final[dict[str, str]] = {
    "thousand": "thousand",
    "million": "million",
    "billion": "billion",
    "trillion": "trillion",
    "k": "thousand",
    "K": "thousand",
    "m": "million",
    "M": "million",
    "mn": "million",
    "bn": "billion",
    "B": "billion",
    "tn": "trillion",
}

MONTHS: Final = (
    "January February March April May June July August September October November December".split()
)
MONTH_ABBREVIATIONS: Final[dict[str, str]] = {
    "Jan": "January",
    "Feb": "February",
    "Mar": "March",
    "Apr": "April",
    "Jun": "June",
    "Jul": "July",
    "Aug": "August",
    "Sep": "September",
    "Sept": "September",
    "Oct": "October",
    "Nov": "November",
    "Dec": "December",
}
WEEKDAY_ABBREVIATIONS: Final[dict[str, str]] = {
    "Mon": "Monday",
    "Tue": "Tuesday",
    "Tues": "Tuesday",
    "Wed": "Wednesday",
    "Thu": "Thursday",
    "Thur": "Thursday",
    "Thurs": "Thursday",
    "Fri": "Friday",
    "Sat": "Saturday",
    "Sun": "Sunday",
}

# Titles: said before a name, never end a sentence.
TITLES: Final[dict[str, str]] = {
    "Mr": "Mister",
    "Mrs": "Missus",
    "Ms": "Miz",
    "Dr": "Doctor",
    "Prof": "Professor",
    "Rev": "Reverend",
    "Fr": "Father",
    "Hon": "Honorable",
    "Gov": "Governor",
    "Sen": "Senator",
    "Rep": "Representative",
    "Pres": "President",
    "Gen": "General",
    "Col": "Colonel",
    "Capt": "Captain",
    "Cpt": "Captain",
    "Lt": "Lieutenant",
    "Sgt": "Sergeant",
    "Cmdr": "Commander",
    "Adm": "Admiral",
    "Supt": "Superintendent",
}

# Abbreviations with a full stop that a person expands; those marked True may end a sentence
# (then the full stop stays after the words, so the sentence still ends there).
ABBREVIATIONS: Final[dict[str, tuple[str, bool]]] = {
    "etc": ("et cetera", True),
    "vs": ("versus", False),
    "approx": ("approximately", False),
    "appt": ("appointment", True),
    "dept": ("department", True),
    "Dept": ("Department", True),
    "est": ("established", False),
    "Est": ("Established", False),
    "Inc": ("Incorporated", True),
    "Ltd": ("Limited", True),
    "Corp": ("Corporation", True),
    "Co": ("Company", True),
    "Bros": ("Brothers", True),
    "Jr": ("Junior", True),
    "Sr": ("Senior", True),
    "Ave": ("Avenue", True),
    "Blvd": ("Boulevard", True),
    "Rd": ("Road", True),
    "Ln": ("Lane", True),
    "Mt": ("Mount", False),
    "Hwy": ("Highway", True),
    "Univ": ("University", True),
    "misc": ("miscellaneous", True),
    "govt": ("government", True),
    "intl": ("international", True),
    "Intl": ("International", True),
    "dept.": ("department", True),
    "e.g": ("for example", False),
    "i.e": ("that is", False),
    "a.k.a": ("also known as", False),
    "cf": ("compare", False),
    "ca": ("circa", False),
    "c": ("circa", False),
}

# Written before a number: "p. 5", "No. 3", "Fig. 2".
BEFORE_NUMBER: Final[dict[str, str]] = {
    "p": "page",
    "pp": "pages",
    "para": "paragraph",
    "paras": "paragraphs",
    "No": "number",
    "no": "number",
    "Nos": "numbers",
    "Fig": "figure",
    "fig": "figure",
    "Figs": "figures",
    "Vol": "volume",
    "vol": "volume",
    "Ch": "chapter",
    "ch": "chapter",
    "Sec": "section",
    "sec": "section",
    "Art": "article",
    "art": "article",
    "Eq": "equation",
    "eq": "equation",
    "Ex": "example",
    "Tel": "telephone",
    "tel": "telephone",
    "Ph": "phone",
    "Rm": "room",
    "rm": "room",
    "Apt": "apartment",
    "apt": "apartment",
    "Ste": "suite",
    "Pt": "part",
    "pt": "part",
    "Op": "opus",
    "op": "opus",
}

# A Roman numeral after these is a count: "Chapter IV" is "chapter four", "World War II" "two".
ROMAN_CARDINAL_CONTEXT: Final = frozenset(
    """
    chapter chapters part parts book books volume volumes act acts scene section article appendix phase
    episode season stage level grade class type war round title schedule psalm canto movement symphony
    edition series star wars rocky bowl game vol ch pt world
    """.split()
)
# A Roman numeral after one of these names is a regnal number: "Henry VIII" is "Henry the Eighth".
REGNAL_NAMES: Final = frozenset(
    """
    Henry Edward George William Richard Charles James John Elizabeth Mary Anne Victoria Louis Philip
    Frederick Alexander Peter Ivan Nicholas Catherine Constantine Leo Pius Benedict Gregory Innocent
    Clement Boniface Urban Paul Francis Ferdinand Alfonso Carlos Juan Napoleon Ramesses Ramses Rameses
    Amenhotep Thutmose Ptolemy Cleopatra Darius Xerxes Otto Wilhelm Friedrich Karl Gustav Christian
    Harald Olaf Haakon Sancho Pedro Manuel Joseph Leopold Rudolf Sigismund Stephen Malcolm David Robert
    Kenneth Duncan Llywelyn Umberto Victor Emmanuel Felipe Juan Rama Hussein Abdullah Mohammed Selim
    Suleiman Mehmed Murad Bayezid Ahmed Mustafa Innocent Sixtus Julius Adrian Celestine Martin Eugene
    Nicholas Calixtus Alexios Basil Michael Romanos Andronikos Manuel Justinian Theodosius Valentinian
    Jr Sr
    """.split()
)
