"""Hand-written contrast lexicon: what WordNet (``data/wordnet_lexicon.json.gz``) lacks or says badly.

Everything here is lowercase. :mod:`ragbudget.cache.contrast` reads four kinds of entries:

- ``CLASSES``: closed classes of mutually exclusive values. Each class is a list of groups; words of
  one group mean the same ("usd", "dollar", "$"), words of two groups of one class contrast ("dollar"
  vs "euro", "celsius" vs "fahrenheit", "monday" vs "friday", "he" vs "she");
- ``ANTONYMS``: pairs WordNet misses (``before``/``after``, ``login``/``logout``, ``buyer``/``seller``);
- ``SYNONYMS``: groups of everyday question words WordNet does not link ("laptop"/"notebook");
- ``DEGREE_MARKERS`` and ``FILLERS``: words that make a comparative or superlative on their own, and
  phrases that only change how a question is asked ("could you please tell me", "what is the best way to");
  ``REWRITES``: phrases that ask what a wh-word asks ("what is the reason" → "why").
"""

from __future__ import annotations

import re


def _groups(text: str) -> list[frozenset[str]]:
    """'a b | c d' -> [{a, b}, {c, d}]."""
    return [frozenset(g.split()) for g in text.split("|") if g.strip()]


CLASSES: dict[str, list[frozenset[str]]] = {
    "currency": _groups("""
        dollar dollars usd $ buck bucks | euro euros eur € | pound pounds gbp £ sterling quid |
        yen jpy ¥ | yuan renminbi rmb cny | rupee rupees inr | franc francs chf | peso pesos |
        ruble rubles rouble roubles | lira lire | krona kronor sek | krone kroner nok dkk |
        rand zar | reais brl | bitcoin bitcoins btc | ether eth ethereum | dinar dinars |
        dirham dirhams aed | baht thb | ringgit myr | shekel shekels ils | zloty pln | krw |
        cent cents | penny pence"""),
    "length": _groups("""
        km kms kilometer kilometers kilometre kilometres | mile miles mi | meter meters metre metres |
        cm centimeter centimeters centimetre centimetres | mm millimeter millimeters millimetre millimetres |
        inch inches | foot feet ft | yard yards yd | nautical | light-year lightyear lightyears"""),
    "mass": _groups("""
        kg kgs kilo kilos kilogram kilograms kilogramme | gram grams gramme | mg milligram milligrams |
        lb lbs pound pounds | ounce ounces oz | ton tons | tonne tonnes | stone stones"""),
    "temperature": _groups("celsius centigrade °c | fahrenheit °f | kelvin"),
    "volume": _groups("""
        liter liters litre litres | milliliter milliliters millilitre millilitres ml |
        gallon gallons gal | quart quarts | pint pints | cup cups | tablespoon tablespoons tbsp |
        teaspoon teaspoons tsp | barrel barrels"""),
    "data": _groups("""
        bit bits | byte bytes | kb kilobyte kilobytes | mb megabyte megabytes | gb gigabyte gigabytes |
        tb terabyte terabytes | mbps | gbps"""),
    "time_unit": _groups("""
        millisecond milliseconds | second seconds sec secs | minute minutes min mins |
        hour hours hr hrs | day days | week weeks | month months | year years yr yrs | decade decades |
        century centuries"""),
    "frequency": _groups("daily | weekly | monthly | yearly annually annual | hourly"),
    "speed": _groups("mph | kph kmh km/h | knot knots"),
    "power": _groups("watt watts | kilowatt kilowatts kw | kwh | volt volts | amp amps ampere | joule joules |"
                     "calorie calories kcal"),
    "weekday": _groups("monday | tuesday | wednesday | thursday | friday | saturday | sunday | weekday weekdays |"
                       "weekend weekends"),
    "month": _groups("january | february | march | april | june | july | august | september | october |"
                     "november | december"),
    "season": _groups("spring | summer | autumn fall | winter"),
    "daypart": _groups("morning mornings | afternoon afternoons | evening evenings | night nights tonight"),
    "relative_day": _groups("yesterday | today | tomorrow"),
    "tense": _groups("did didn't was wasn't were weren't had hadn't used | do does don't doesn't is isn't are aren't"
                     "am has hasn't have haven't | will won't shall gonna"),
    "modal": _groups("must should ought need needs required mandatory | can could may might allowed able possible"),
    "person": _groups("""
        i me my mine myself you your yours yourself we us our ours one | he him his himself |
        she her hers herself | they them their theirs themselves"""),
    "gender": _groups("""
        male males man men boy boys gentleman gentlemen husband husbands father fathers dad son sons
        brother brothers king kings uncle nephew grandfather boyfriend |
        female females woman women girl girls lady ladies wife wives mother mothers mom mum daughter
        daughters sister sisters queen queens aunt niece grandmother girlfriend"""),
    "quantifier": _groups("all every everything everyone everybody | some several any | each | most |"
                          "many much | few little | both | either"),
    "compass": _groups("north northern northbound | south southern southbound | east eastern eastbound |"
                       "west western westbound | northeast | northwest | southeast | southwest"),
    "side": _groups("left | right | center centre middle"),
    "ordinal": _groups("first initial earliest | last final latest | next upcoming following | previous prior preceding"
                       "| second | third | fourth"),
    "wh": _groups("who whom whose | where | when | why | how"),
    "color": _groups("red | blue | green | yellow | black | white | orange | purple | pink | brown | grey gray |"
                     "silver | gold golden"),
    "os": _groups("windows | mac macos osx | linux ubuntu | android | ios iphone ipad"),
    "language": _groups("python | java | javascript js | typescript ts | c++ cpp | c# csharp | ruby | golang |"
                        "rust | php | perl | kotlin | swift | sql | html | css"),
    "planet": _groups("mercury | venus | earth | mars | jupiter | saturn | uranus | neptune | pluto | moon | sun"),
    "element": _groups("iron | copper | gold | silver | aluminium aluminum | lead | zinc | steel | tin | carbon |"
                       "oxygen | hydrogen | nitrogen | helium"),
}

ANTONYMS: list[tuple[str, str]] = [(a, b) for a, b in (p.split("/") for p in """
before/after earlier/later early/late sooner/later prior/subsequent pre/post past/future ago/hence
since/until start/end begin/end beginning/end start/finish begin/finish open/shut opened/closed
upload/download uploading/downloading login/logout log-in/log-out signin/signout signup/cancel
install/uninstall installing/uninstalling encrypt/decrypt encryption/decryption encode/decode
compress/decompress zip/unzip mount/unmount subscribe/unsubscribe follow/unfollow like/dislike
lock/unlock connect/disconnect enable/disable enabled/disabled activate/deactivate on/off in/out
into/out up/down upward/downward upwards/downwards upstream/downstream uphill/downhill
close/far near/far upper/lower higher/lower high/low highest/lowest above/below over/under beneath/above inner/outer
inside/outside interior/exterior internal/external indoor/outdoor indoors/outdoors inbound/outbound
incoming/outgoing input/output import/export importer/exporter imports/exports front/back
forward/backward forwards/backwards ahead/behind top/bottom head/tail north/south east/west
add/remove add/delete insert/delete append/remove attach/detach include/exclude join/leave
arrive/depart arrival/departure arrive/leave enter/exit entry/exit entrance/exit come/go
send/receive sender/recipient sender/receiver give/take give/receive lend/borrow lender/borrower
lending/borrowing buy/sell buyer/seller buying/selling purchase/sell bought/sold customer/supplier
employer/employee boss/employee teacher/student landlord/tenant host/guest parent/child
doctor/patient winner/loser win/lose victory/defeat won/lost gain/loss profit/loss income/expense
income/expenditure revenue/cost credit/debit deposit/withdraw deposit/withdrawal asset/liability
surplus/deficit export/import increase/decrease increase/reduce raise/lower increase/lower raise/cut rise/fall
rise/drop grow/shrink growth/decline expand/contract expansion/contraction inflate/deflate
inflation/deflation accelerate/decelerate speed/slow heat/cool heating/cooling warm/cool
warmer/cooler hotter/colder freeze/thaw freeze/melt charge/discharge charging/discharging
push/pull plus/minus positive/negative pros/cons advantage/disadvantage advantages/disadvantages
benefit/risk benefits/risks strength/weakness strengths/weaknesses allow/block allow/forbid
allow/prohibit permit/forbid permitted/prohibited allowed/banned legal/banned accept/decline
approve/reject approve/deny approval/rejection admit/deny confirm/deny agree/disagree
support/oppose supporter/opponent pro/anti for/against  ally/enemy friend/enemy
friend/foe attack/defend offense/defense offence/defence offensive/defensive hire/fire hiring/firing
hire/lay promote/demote promotion/demotion employ/dismiss maximum/minimum max/min maximize/minimize
maximise/minimise most/least more/less more/fewer many/few majority/minority all/none always/never
everything/nothing everyone/nobody everywhere/nowhere sometimes/always often/rarely frequently/rarely
usually/rarely common/rare cheap/pricey cheapest/priciest affordable/expensive budget/luxury
safe/dangerous safer/riskier safety/danger secure/insecure security/vulnerability healthy/harmful
good/bad better/worse best/worst pass/fail passed/failed success/failure succeed/fail correct/wrong
right/wrong true/false truth/lie fact/myth real/fake genuine/fake original/copy same/different
similar/different similarity/difference equal/unequal male/female men/women man/woman boy/girl
husband/wife father/mother son/daughter brother/sister king/queen he/she him/her his/her
active/passive actively/passively singular/plural odd/even acid/base acidic/alkaline
vertical/horizontal horizontally/vertically clockwise/anticlockwise clockwise/counterclockwise
ascending/descending ascend/descend asc/desc  client/server
frontend/backend front-end/back-end sync/async synchronous/asynchronous static/dynamic public/private
global/local remote/local online/offline wired/wireless manual/automatic manually/automatically
analog/digital hardware/software uppercase/lowercase  bold/italic import/export
read/write reader/writer readable/writable  publish/unpublish show/hide visible/hidden
expand/collapse  horizontal/vertical landscape/portrait dark/light darker/lighter
night/day sunrise/sunset dawn/dusk summer/winter spring/autumn weekday/weekend young/old younger/older
youngest/oldest new/old newer/older newest/oldest modern/ancient beginner/advanced junior/senior
novice/expert amateur/professional fresh/frozen raw/cooked sweet/sour sweet/savory sweet/bitter
wet/dry full/empty fill/empty filled/emptied fullest/emptiest thick/thin wide/narrow deep/shallow
long/short tall/short big/small large/small huge/tiny bigger/smaller largest/smallest
biggest/smallest heavy/light heavier/lighter fast/slow faster/slower fastest/slowest quick/slow
hard/easy harder/easier hardest/easiest difficult/easy strong/weak loud/quiet noisy/quiet rich/poor
wealthy/poor expensive/inexpensive costly/cheap overpriced/underpriced overrated/underrated
overweight/underweight overpaid/underpaid overestimate/underestimate overuse/underuse
oversupply/shortage abundant/scarce surplus/shortage excess/shortage present/absent presence/absence
arrive/leave alive/dead living/dead birth/death born/died marry/divorce married/divorced
married/single wedding/divorce love/hate happy/sad happiest/saddest optimistic/pessimistic
optimist/pessimist urban/rural city/countryside domestic/foreign domestic/international
national/international inland/coastal land/sea  offline/online
""".split())]

SYNONYMS: list[frozenset[str]] = _groups("""
    laptop notebook | delete remove erase | quick fast rapid speedy | quickly fast rapidly |
    tv television | app application | pic picture photo photograph image | info information |
    doc document | docs documentation | repo repository | config configuration settings setting |
    phone smartphone cellphone mobile | email e-mail mail | website site webpage | internet web online |
    film movie | kid child | buy purchase | cost price | cheap inexpensive affordable low-cost |
    big large | error mistake | fix repair resolve solve | begin start commence | get obtain acquire |
    show display | help assist | ill sick | shut close | boss manager supervisor | car automobile vehicle |
    job work employment | salary pay wage | choose pick select | use utilize utilise employ |
    make create build | find locate | need require | want wish | reset restore | change modify alter |
    update upgrade | password passcode pin | account profile | customer client | cancel terminate |
    refund reimbursement | order purchase | ship deliver send | shipping delivery | 
    contact reach |  explain describe | meaning definition | mean signify | happen occur |
    allowed permitted | rule regulation | law legislation | doctor physician | medicine medication drug |
    cure treat | hurt injure | injury wound |   shop store | hotel accommodation |
    trip journey travel voyage |   book reserve | booking reservation |
     flight plane | airport airfield | train railway rail | bus coach | price fare |
    nearby near | far distant | location place | country nation |  
    author writer | book novel | song track | singer vocalist | famous well-known renowned |
    important significant crucial | main primary principal chief | benefit advantage | drawback disadvantage |
    problem issue | question query | answer reply response | ask inquire enquire | talk speak |
    say state | study learn |  exam test | grade mark score | 
    student pupil | kid youngster | house home | flat apartment | rent lease | big huge enormous |
    small little tiny | begin launch | end finish complete | stop halt cease | speed velocity |
    weight mass | height altitude | amount quantity | total sum | number count | percentage percent
""")

# Words that make a comparative or superlative on their own ("most expensive", "less safe").
DEGREE_MARKERS = frozenset({"more", "most", "less", "least", "fewer", "fewest", "top", "best", "worst"})

# Comparatives and superlatives that WordNet's spelling rules drop because the form is also a noun or a
# verb ("lower", "closer", "later") or irregular ("farther"): without them "highest" / "lowest" was an
# unexplained substitution instead of a contrast.
DEGREE_FORMS = {
    **{w: (w[:-2], "er") for w in (
        "lower", "higher", "longer", "older", "lighter", "warmer", "cooler", "cleaner", "fuller", "sharper",
        "steeper", "smoother", "fresher", "wilder", "smaller", "greater")},
    **{w: (w[:-3], "est") for w in ("lowest", "greatest", "fewest")},
    "larger": ("large", "er"), "later": ("late", "er"), "latest": ("late", "est"), "closer": ("close", "er"),
    "finer": ("fine", "er"), "thinner": ("thin", "er"), "wetter": ("wet", "er"), "flatter": ("flat", "er"), "drier": ("dry", "er"),
    "fewer": ("few", "er"), "farther": ("far", "er"), "farthest": ("far", "est"), "furthest": ("far", "est"),
    "elder": ("old", "er"), "eldest": ("old", "est"),
}

# Ways of asking that do not change the question; removed before the difference is taken.
FILLERS = [re.compile(p) for p in (
    r"\b(?:can|could|would|will) (?:someone|anyone|somebody|anybody) (?:please )?(?:explain(?: to me)?|tell me|"
    r"help me understand)\b",  # before "explain" alone, which would leave "can someone"
    r"\b(?:hi|hello|hey|thanks|thank you|cheers)\b[,!.]?",
    r"\b(?:please|kindly|pls|plz)\b",
    r"\b(?:could|can|would|will) you (?:please )?(?:tell|show|explain to|let) me\b",
    r"\b(?:could|can|would|will) you (?:please )?(?:explain|tell|help me(?: to)?|help(?: me)? understand)\b",
    r"\bi(?:'d| would) like to (?:know|understand|learn|find out)\b",
    r"\bi (?:want|need|wish|am trying|'m trying|have been trying) to (?:know|understand|learn|find out)\b",
    r"\bi (?:was|am|'m) wondering\b", r"\bdo you (?:happen to )?know\b", r"\bany idea\b",
    r"\bis it possible (?:for me )?to\b", r"\bis there (?:a|any) way (?:for me )?to\b",
    r"\bwhat(?:'s| is| are) the (?:best |right |proper |correct |easiest |simplest |recommended )?"
    r"(?:way|ways|method|procedure|process|steps|step) (?:to|for)\b",
    r"\bhow (?:do|can|could|should|would|might|may) (?:i|you|we|one|someone|people)(?: go about)?\b",
    r"\b(?:can|could|do|should|may) (?:i|we|you|one) (?:find|locate)\b", r"\bhow to\b", r"\bwhat do (?:i|you|we) do to\b", r"\bwhat should (?:i|we|one) do to\b",
    r"\bwhat (?:steps|actions) (?:do|should|can|must) (?:i|we|you|one) take to\b",
    r"\bin order to\b", r"\bexactly\b", r"\bactually\b", r"\breally\b", r"\bbasically\b",
    r"\btell me\b", r"\bexplain\b", r"\bhelp me\b", r"\bquick question\b", r"\bjust\b",
    r"\bin (?:simple|plain|layman'?s|laymen'?s|easy) (?:terms|words|english|language)\b",
    r"\bwhat (?:can|could|must) (?:i|we|you|one) do to\b",
    r"\bwhat (?:are|is) (?:some|a few|a|any) (?:good |simple |easy |effective )?(?:ways?|methods?|tips|tricks) "
    r"(?:to|for)\b",
)]
# phrases that ask the same thing as a wh-word, rewritten to it before the fillers go ("What is the reason
# cats purr?" asks "Why do cats purr?")
REWRITES = [(re.compile(p), r) for p, r in (
    (r"\bwhat(?:'s| is) the reason(?: why| that)?\b", " why "),
    (r"\bfor what reason\b", " why "),
)]
