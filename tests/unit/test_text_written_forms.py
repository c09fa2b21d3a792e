"""Written forms read as a person says them (libs.text.normalizer): each kind, the bounds, and that
plain words pass through untouched."""

from __future__ import annotations

import pytest

from libs.text.normalizer import MAX_EXPANSION, expand_written_forms, numbers


@pytest.mark.parametrize(
    ("digits", "words"),
    [
        ("0", "zero"),
        ("7", "seven"),
        ("13", "thirteen"),
        ("40", "forty"),
        ("42", "forty-two"),
        ("100", "one hundred"),
        ("101", "one hundred one"),
        ("1000", "one thousand"),
        ("1234", "one thousand two hundred thirty-four"),
        ("1000000", "one million"),
        ("2500000", "two million five hundred thousand"),
        ("7000000000", "seven billion"),
    ],
)
def test_cardinals(digits: str, words: str) -> None:
    assert numbers.cardinal(digits) == words


@pytest.mark.parametrize(
    ("digits", "words"),
    [("1", "first"), ("2", "second"), ("3", "third"), ("5", "fifth"), ("12", "twelfth"), ("20", "twentieth"),
     ("21", "twenty-first"), ("100", "one hundredth"), ("73", "seventy-third")],
)  # fmt: skip
def test_ordinals(digits: str, words: str) -> None:
    assert numbers.ordinal(digits) == words


@pytest.mark.parametrize(
    ("digits", "words"),
    [("1066", "ten sixty-six"), ("1900", "nineteen hundred"), ("1905", "nineteen oh five"), ("1999", "nineteen ninety-nine"),
     ("2000", "two thousand"), ("2005", "two thousand five"), ("2010", "twenty ten"), ("2026", "twenty twenty-six")],
)  # fmt: skip
def test_years(digits: str, words: str) -> None:
    assert numbers.year(digits) == words


def test_a_number_past_fifteen_digits_is_read_digit_by_digit() -> None:
    assert numbers.cardinal("1234567890123456") == "one two three four five six seven eight nine zero one two three four five six"


@pytest.mark.parametrize(
    ("written", "spoken"),
    [
        ("It costs $3.50.", "It costs three dollars fifty."),
        ("Gum is $0.99 here.", "Gum is ninety-nine cents here."),
        ("They raised $2.5 million.", "They raised two point five million dollars."),
        ("It was €4.99 or £5 or ¥500.", "It was four euros ninety-nine or five pounds or five hundred yen."),
        ("We paid 100 USD.", "We paid one hundred dollars."),
        ("Her birthday is 12/25/2026.", "Her birthday is December twenty-fifth, twenty twenty-six."),
        ("Due 2024-01-05.", "Due January fifth, twenty twenty-four."),
        ("See you Jan. 15th then.", "See you January fifteenth then."),
        ("We met on March 3, 1985.", "We met on March third, nineteen eighty-five."),
        ("The train leaves at 9:05 sharp.", "The train leaves at nine oh five sharp."),
        ("It starts at 10:30 a.m. today.", "It starts at ten thirty a.m. today."),
        ("Call me at 3pm.", "Call me at three p.m."),
        ("World War II ended in 1945.", "World War two ended in nineteen forty-five."),
        ("Henry VIII had six wives.", "Henry the eighth had six wives."),
        ("Read Chapter IV tonight.", "Read Chapter four tonight."),
        ("Add 1/2 cup of milk.", "Add one half cup of milk."),
        ("Pour 1 1/2 cups.", "Pour one and a half cups."),
        ("I ran 10 km in 42 min.", "I ran ten kilometers in forty-two minutes."),
        ("The file is 250 MB.", "The file is two hundred fifty megabytes."),
        ("It is 1 km away.", "It is one kilometer away."),
        ("Today is 72°F.", "Today is seventy-two degrees Fahrenheit."),
        ("Turn to p. 5, para. 3.", "Turn to page five, paragraph three."),
        ("Sales rose 12%.", "Sales rose twelve percent."),
        ("It was -5 outside.", "It was minus five outside."),
        ("Pi is about 3.14.", "Pi is about three point one four."),
        ("She came 2nd.", "She came second."),
        ("It was popular in the 1990s.", "It was popular in the nineteen nineties."),
        ("Call 555-0123 now.", "Call five five five, zero one two three now."),
        ("Mail info@example.com today.", "Mail info at example dot com today."),
        ("Go to www.python.org now.", "Go to W W W dot python dot org now."),
        ("Dr. Smith lives on Elm St. Then he left.", "Doctor Smith lives on Elm Street. Then he left."),
        ("St. Mary's church.", "Saint Mary's church."),
        ("Apples, pears, etc. are fine.", "Apples, pears, et cetera are fine."),
        ("Read pages 5-10 tonight.", "Read pages five to ten tonight."),
        ("The ratio was 3:1.", "The ratio was three to one."),
        ("Tom & Jerry.", "Tom and Jerry."),
        ("It is item #5.", "It is item number five."),
        ("Version 2.1.3 is out.", "Version two point one point three is out."),
        ("Avogadro's number is 6.022e23.", "Avogadro's number is six point zero two two times ten to the power of twenty-three."),
        ("It took 1E-09 s.", "It took one times ten to the power of minus nine seconds."),
        ("A charge of 10^-19 coulombs.", "A charge of ten to the power of minus nineteen coulombs."),
        ("It is 2^10 or e^x.", "It is two to the power of ten or e to the power of x."),
        ("Plot x² against (a+b)³ and n⁴.", "Plot x squared against (a+b) cubed and n to the power of four."),
        ("We waited ~30 minutes.", "We waited about thirty minutes."),
        ("If 5 < 6 then 7 > 2.", "If five less than six then seven greater than two."),
        ("Keep it <100 ms.", "Keep it less than one hundred milliseconds."),
        ("Growth was 10%-20% a year.", "Growth was ten percent to twenty percent a year."),
        ("The 2020-2021 season.", "The twenty twenty to twenty twenty-one season."),
        ("Open Mon-Fri and Sat.", "Open Monday to Friday and Saturday."),
        ("Closed on Sat. We reopen in Jan.", "Closed on Saturday. We reopen in January."),
        ("Hours are 9am-5pm daily.", "Hours are nine a.m. to five p.m. daily."),
        ("He is 5'11\" tall.", "He is five feet eleven inches tall."),
        ("It is 1'1\" long.", "It is one foot one inch long."),
        ("Meet in room 5B at 221B Baker St.", "Meet in room 5B at 221B Baker Street."),
        ("A 5 A fuse and a 512 B header.", "A five amps fuse and a five hundred twelve bytes header."),
        ("Use 2½ cups, ¾ tsp and ⅓.", "Use two and a half cups, three quarters of a teaspoon and one third."),
        ("Add ½ oz.", "Add half an ounce."),
        ("ISBN 978-3-16-148410-0.", "ISBN nine seven eight, three, one six, one four eight four one zero, zero."),
        ("Call +44 20 7946 0958.", "Call plus four four, two zero, seven nine four six, zero nine five eight."),
        ("It pays $5/hour, 3 pages/day.", "It pays five dollars per hour, three pages per day."),
        ("Coffee w/ milk, tea w/o sugar.", "Coffee with milk, tea without sugar."),
        ("Open 10 AM - 2 PM.", "Open ten a.m. to two p.m."),
        ("It's 1.000.000 euros.", "It's one million euros."),
        ("Up to 10^999999 and 2^-30.", "Up to ten to the power of nine hundred ninety-nine thousand nine hundred ninety-nine and two to the power of minus thirty."),
        ("Ping 192.168.1.10 now.", "Ping one hundred ninety-two dot one hundred sixty-eight dot one dot ten now."),
        ("Ping 2001:0db8:0:0:8a2e:370:7334:1 now.",
         "Ping two zero zero one colon zero D B eight colon zero colon zero colon eight eigh two E colon three seven zero colon seven three three four colon one now."),
        ("Try ::1, then fe80::1ff:fe23 today.", "Try double colon one, then F E eight zero double colon one F F colon F E two three today."),
        ("Names in code stay: std::vector, cafe::bead, a::b::x.", "Names in code stay: std::vector, cafe::bead, a::b::x."),
        ("About 2/3rds left.", "About two thirds left."),
        ("Due 05-12-2024 or 25-12-2024.", "Due May twelfth, twenty twenty-four or December twenty-fifth, twenty twenty-four."),
        ("2.5M users, 10M views, 1.2bn and 10k steps.", "two point five million users, ten million views, one point two billion and ten thousand steps."),
        ("A 2.4GHz radio, 2.5x faster.", "A two point four gigahertz radio, two point five times faster."),
        ("Lakers vs Celtics; VS Code stays.", "Lakers versus Celtics; VS Code stays."),
        ("Order ID#4521 and #7.", "Order ID number four thousand five hundred twenty-one and number seven."),
        ("A Ph.D. and a 5K run.", "A P H D and a 5K run."),
        ("Follow #MeToo, #BlackLivesMatter and #NBAFinals.", "Follow hashtag Me Too, hashtag Black Lives Matter and hashtag NBA Finals."),
        ("Tagged #throwback_thursday; C# and #7 are no hashtags.", "Tagged hashtag throwback thursday; C sharp and number seven are no hashtags."),
        ("Dial 911 or call 999; text 988.", "Dial nine one one or call nine nine nine; text nine eight eight."),
        ("Area 3 ft³ and 10 cm², for ₿2.", "Area three cubic feet and ten square centimeters, for two bitcoin."),
        ("Call +1 555 123 4567; code in C# or F#.", "Call plus one, five five five, one two three, four five six seven; code in C sharp or F sharp."),
        ("It lost -$5, from $5-$10, at 3pm EST.", "It lost minus five dollars, from five dollars to ten dollars, at three PM EST."),
        ("It ends at 5pm. At 9am John left.", "It ends at five p.m. At nine AM John left."),
        ("Call 100 people, then dial 100.", "Call one hundred people, then dial one zero zero."),
        ("Smith, Jr., lives at 221B Baker St., London.", "Smith, Junior, lives at 221B Baker Street, London."),
        ("It weighs 3 lbs., not 2 oz.; etc., and so on.", "It weighs three pounds, not two ounces; et cetera, and so on."),
    ],
)
def test_written_forms_become_spoken_words(written: str, spoken: str) -> None:
    assert expand_written_forms(written) == spoken


@pytest.mark.parametrize(
    "text",
    [
        "The quick brown fox jumps over the lazy dog.",
        "I have a dream, she said, and he listened.",
        "MP3 players and COVIDs are words with digits inside.",
        "A line\nbroken in two.\n\nA new paragraph.",
        "As studies² show, a -> b.",  # a footnote's mark after a word; an arrow
        "> A quoted line\nand <Enter> is a key, not markup.",
    ],
)
def test_text_without_written_forms_is_unchanged(text: str) -> None:
    assert expand_written_forms(text) == text


@pytest.mark.parametrize(
    ("written", "spoken"),
    [
        ("Wait... what?", "Wait, what?"),
        ("He said...and left.", "He said, and left."),
        ("Wait ... what", "Wait, what"),
        ("I waited... Then he came.", "I waited. Then he came."),
        ("I don't know...", "I don't know."),
        ("So...\nAnyway.", "So.\nAnyway."),
        ('"Wait..." she said.', '"Wait," she said.'),
        ("Really...? Yes.", "Really? Yes."),
        ("... and then it rained.", "and then it rained."),
        ("Quote (...) ends.", "Quote () ends."),
        ("Two dots.. stay, and one. too.", "Two dots.. stay, and one. too."),
    ],
)
def test_an_ellipsis_is_a_pause_not_nothing(written: str, spoken: str) -> None:
    assert expand_written_forms(written) == spoken


@pytest.mark.parametrize(
    ("written", "spoken"),
    [
        ("This is **very** important.", "This is very important."),
        ("I *really* mean it, ~~not~~ _truly_.", "I really mean it, not truly."),
        ("# Getting started\n## Then\n* Buy milk\n+ Eggs", "Getting started.\nThen.\nBuy milk.\nEggs"),
        ("See [the docs](https://example.com/docs) for more.", "See the docs for more."),
        ("> A quoted line\nand <b>bold</b> markup.", "> A quoted line\nand  bold  markup."),
        ('<a href="https://x.org">link</a> and H<sub>2</sub>O', " link  and H two O"),
        ("5 * 3 = 15 and x * y, 2*3.", "five times three = fifteen and x times y, two times three."),
        ("We're #1 at #AI and snake_case_names and __init__.", "We're number one at hashtag AI and snake_case_names and init."),
    ],
)
def test_markdown_and_html_markup_is_not_read_aloud(written: str, spoken: str) -> None:
    assert expand_written_forms(written) == spoken


@pytest.mark.parametrize(
    ("written", "spoken"),
    [
        ("Steps:\n1. Mix the flour\n2) Bake it\n- Serve warm\n\u2022 Enjoy", "Steps:\none, Mix the flour.\ntwo, Bake it.\nServe warm.\nEnjoy"),
        ("| Name | Age |\n|------|:---:|\n| Bob | 42 |", "Name, Age.\n\nBob, forty-two."),
        ("```python\nprint(1)\n```\nDone.", "\nprint(one)\n\nDone."),
        ("- an item whose text\n  wraps onto a line\n- the next", "an item whose text\n  wraps onto a line.\nthe next"),
        ("> A quote goes on\nas prose does", "> A quote goes on\nas prose does"),
    ],
)
def test_lists_tables_and_headings_are_read_item_by_item(written: str, spoken: str) -> None:
    """LLM output writes lists, tables and headings a line each without full stops: espeak-ng ran
    them into one sentence and read a table as one string of words. The last item needs none: the
    text, or a blank line, ends its sentence."""
    assert expand_written_forms(written) == spoken


def test_an_abbreviation_that_ends_a_sentence_keeps_the_full_stop() -> None:
    assert expand_written_forms("We sell pens, paper, etc. Then we close.") == "We sell pens, paper, et cetera. Then we close."


def test_expansion_is_bounded_per_character_on_hostile_text() -> None:
    hostile = "9" * 40 + " " + "1," * 300 + " " + "$1.0" * 200 + " " + "a@b." * 300 + " " + "12/12/12 " * 100
    spoken = expand_written_forms(hostile)
    assert len(spoken) <= MAX_EXPANSION * len(hostile)
    assert spoken.startswith("nine nine nine nine")  # forty digits: read one by one, not as a number
