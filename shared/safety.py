"""The emergency guard and the emergency reply: the one owner of both.

The gateway applies the guard before any retrieval (an emergency is answered at once) and the synthesizer
applies it to every request it gets (an emergency never reaches the model, whoever sends it); both call
:func:`check_emergency` and build the reply with :func:`emergency_reply`, so the rule and the message exist
once.

The guard is a small linguistic model, not a list of alarming words. A message is an emergency when it
describes

- an **acute situation**: a danger sign in the words people use for it (someone not breathing or turning
  blue, collapsed or not waking, chest pain or pressure, a face drooping or speech going wrong, pills or a
  poison swallowed, a throat or tongue swelling, fever with confusion or a rash that does not fade, heavy
  bleeding, a fit that will not stop, an intent to die);
- happening to a **person here and now**: the writer ("I", "my chest") or someone with them ("my dad",
  "a man at the bus stop", "our 2 year old"), told in the present ("is", "won't", "just", "right now",
  "20 minutes ago") rather than as history ("two years ago", "as a child");
- and is **not framed as a question about care or research**: "my patient", "a 52-year-old presents",
  "management of", "what is the evidence", "incidence", "versus", a question about patients in general.

Two parts decide. The **linguistic rules** below find the situation, the person, the time and the framing,
and name the cues (that is the reason in the response). The **semantic model** reads the whole message: a
sentence embedding (``EVIDENTIA_SAFETY_GUARD_MODEL``, the packaged all-MiniLM-L6-v2, on CPU) and a logistic
regression trained on labelled messages (``shared/safety_guard.json``, made by ``python -m
evaluation.emergency_guard``); people describe emergencies in more ways than rules can list, and the model
generalises where the rules do not (``docs/benchmarks.md``). With the model: an emergency when its
probability reaches the threshold, except that a question framed by a clinician ("my patient", "a
52-year-old presents") never is, and a stated intent to die in the first person always is. Without it
(``EVIDENTIA_SAFETY_SEMANTIC=false``, or the model cannot load): the rules alone.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from shared.events import EmergencyCheck, SynthesisReply
from shared.settings import EmbeddingSettings, SafetySettings

log = logging.getLogger(__name__)

GUARD_WEIGHTS = Path(__file__).with_name("safety_guard.json")

DISCLAIMER = (
    "This summary of published research is for information only and is not medical advice. "
    "Talk to a qualified health professional about any medical decision."
)

EMERGENCY_ANSWER = (
    "This sounds like it could be a medical emergency. Call your local emergency number (for example 911, "
    "112 or 999) or go to the nearest emergency department now. If you are thinking about harming yourself, "
    "contact a crisis line such as 988 (US) or your local equivalent immediately. Evidentia cannot help "
    "with emergencies."
)


def _rx(*parts: str) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{p})" for p in parts), re.IGNORECASE)


# Someone: a pronoun or a person named by their relation to the writer (not "my patient").
_KIN = (
    r"dad|father|mum|mom|mother|mam|nan|nana|gran|granny|grandma|grandmother|grandad|grandpa|grandfather|"
    r"husband|hubby|wife|partner|boyfriend|girlfriend|fianc[eé]e?|son|daughter|child|kid|kids|baby|toddler|"
    r"newborn|infant|brother|sister|uncle|aunt|auntie|cousin|niece|nephew|friend|mate|flatmate|roommate|"
    r"housemate|neighbou?r|colleague|co-?worker|boss|teen|teenager|student|little (?:boy|girl|one)|"
    r"(?:\d+|one|two|three|four|five|six) (?:year|month|week)[- ]old|elderly (?:father|mother|parent)|parent|"
    r"grandson|granddaughter|stepson|stepdaughter|fiance"
)
_BYSTANDER = _rx(
    rf"\b(?:my|our)\s+(?:(?:little|elderly|old|teenage|young|\w+-year-old|\d+ (?:year|month) old)\s+)?(?:{_KIN})\b",
    r"\b(?:some(?:one|body)|a (?:man|woman|guy|lady|girl|boy|kid|child|person|hiker|driver|stranger|player)|"
    r"this (?:man|woman|guy|lady|person|kid)|the (?:man|woman|guy|lady|person|driver) (?:next to|in|at|on|beside)|"
    r"(?:old|young) (?:man|woman|lady|guy)|(?:kid|boy|girl|man|woman|guy) at (?:school|work|the)|"
    r"(?:he|she|they)(?:'s| is| are| has| have| can'?t| won'?t| isn'?t| keeps| just| looks?| seems?| says?))\b",
    rf"^(?:(?:little|old|elderly|the|our|my)\s+)?(?:{_KIN})(?:'s)?\b",
    rf"\b(?:{_KIN})'s\s+(?:\w+\s+)?(?:face|mouth|lips?|chest|breathing|skin|arm|leg|head|heart|temperature)\b",
)
_FIRST_PERSON = _rx(
    r"\b(?:i|i'm|im|i've|ive|i'll|i'd|me|myself)\b",
    # the subject left out, as people write about themselves: "feeling suicidal", "can't breathe", "been having"
    r"^(?:(?:been|just|really|so|still)\s+)?(?:thinking|feeling|planning|wanting|want|going to|having|getting|"
    r"can'?t|cannot|need|needing|struggling|been|started|starting|keep|keeps)\b",
    # telegraphic, a bare body part with a present verb: "throat feels thick, voice changing"
    r"(?:^|[,.;:\-]\s*)(?:throat|chest|face|lips?|tongue|head|heart|arm|leg|legs|vision|breathing|voice|mouth)\s+"
    r"(?:feels?|is|are|hurts?|\w+ing)\b",
    # "my" + anything that is not a person: the writer's own body, life, medicines ("my chest", "my life").
    rf"\bmy\s+(?!(?:(?:little|elderly|old|teenage|young|\w+-year-old|\d+ (?:year|month) old)\s+)?(?:{_KIN}|"
    r"patients?|client|clients)\b)\w+",
)
_CLINICIAN = _rx(
    r"\bmy patient'?s?\b",
    r"\bour patients?\b",
    r"\bpatients?\b",
    r"\ba \d{1,3}[- ]year[- ]old\b[^.?!]{0,60}\b(?:presents?|presenting|admitted|brought|with|on|started|has|had)\b",
    r"^\s*case\s*:",
    r"\bhow should (?:we|i|a|one)\b(?!.*\b(?:help|save)\b)",
    r"\b(?:we|i) (?:admitted|saw|see|treated|are treating|are managing)\b",
    r"\bin the (?:ed|er|emergency department|icu|clinic|ward)\b",
    r"\bprehospital\b|\bbystanders?\b|\bclinicians?\b|\bgp\b",
)
_RESEARCH = _rx(
    r"\bevidence\b|\bliterature\b|\btrials?\b|\bstud(?:y|ies)\b|\bmeta-analys[ie]s\b|\bguidelines?\b",
    r"\bincidence\b|\bprevalence\b|\bepidemiolog\w*|\btrends?\b|\bburden\b|\bmortality\b|\bsurvival\b",
    r"\bprognosis\b|\boutcomes?\b|\brisk factors?\b|\brisk of\b|\bassociat(?:ed|ion)\b|\brates?\b",
    r"\bversus\b|\bvs\.?\b|\bcompared?\b|\befficacy\b|\beffective(?:ness)?\b|\bbenefit\b|\bharmful\b",
    r"\bmanagement\b|\bmanage\b|\btreatment of\b|\btreat(?:ing|ed)? \w+ (?:with|in)\b|\bregimen\b|\bprotocols?\b",
    r"\bindicat(?:ed|ions?)\b|\brecommended\b|\bdoses?\b|\bdosing\b|\bfirst-line\b|\btherapy\b|\bmechanisms?\b",
    r"\bdiagnos\w+\b|\baccura(?:te|cy)\b|\bsensitiv\w+\b|\bscreening\b|\bscore\b|\bmonitor(?:ing)?\b",
    r"\btargets?\b|\bcriteria\b|\bthreshold\b|\bpredict\w*\b|\bdistinguish\w*\b|\bworked? up\b|\bwork-?up\b",
    r"\bin (?:adults|children|adolescents|infants|older (?:people|adults)|women|men|pregnancy|the elderly)\b",
    r"\bamong\b|\bpopulation\b|\bcohort\b|\bsurvivors?\b|\bhow (?:common|often)\b|\bwhat proportion\b",
    r"\bhow many (?:people|patients|cases|deaths|children|adults)\b|^\w+(?: \w+)? question\s*:",
    r"\bwhy (?:does|do|is|are|can) (?:a|an|the|some|people)\b",
    r"\bwarning signs\b|\bearly signs\b|\bsymptoms of\b|\bcan you die\b|\bwhat (?:is|are) the\b",
    # general knowledge and hypotheticals: how to recognise something, what to do if it ever happens
    r"\bhow (?:do|can|would|should) (?:i|you|we|one|people) (?:recogni[sz]e|know|tell|spot|identify)\b",
    r"\bwhat (?:should|do|can) (?:i|you|we|one|people) do if (?:someone|somebody|a person|a child|you|your|"
    r"anyone|ever)\b|\bif (?:someone|somebody|a person|anyone) (?:ever|has|is|starts)\b",
    r"\b(?:does|do|did|can|could)\b[^?]{0,80}\b(?:reduce|improve|increase|prevent|help|work|benefit)\b",
    r"\binterventions?\b|\bprogramm?es?\b|\bstrateg(?:y|ies)\b|\bapproach(?:es)?\b|\btreatments?\b",
)
_PAST = _rx(
    r"\b(?:\d+|a|one|two|three|four|five|several|many|few) (?:years?|months?|weeks?) ago\b",
    r"\blast (?:year|month|week|summer|winter|spring|autumn)\b",
    r"\bin (?:19|20)\d\d\b",
    r"\bas a (?:child|kid|teenager)\b",
    r"\bsurvived\b|\bafter (?:his|her|my|their|a) \w+ (?:last|in)\b|\brecovery\b|\bgrow out\b",
    r"\bhistory of\b|\bprevious\b|\bprevent another\b",
)
_NOW = _rx(
    r"\b(?:right )?now\b|\bjust\b|\bsuddenly\b|\ball of a sudden\b|\bcurrently\b|\bat the moment\b|\btonight\b",
    r"\b\d+\s*(?:mins?|minutes?|hours?|hrs?)\b|\b(?:an?|one|half an?) (?:hour|minute)s?\b|\bsince\b",
    r"\b(?:a few|few|several|a couple of|couple of) (?:mins|minutes|hours|seconds)\b|\bthis (?:morning|evening)\b",
    r"\bkeeps?\b|\bwon'?t\b|\bcan'?t\b|\bcannot\b|\bisn'?t\b|\baren'?t\b|\bstill\b|\bstarted\b|\bstarting\b",
    r"\b(?:is|are|am|i'm|he's|she's|it's)\s+(?:\w+ing|\w+ed|not)\b",
    r"\bhelp\b|\bplease\b|\bwhat (?:do|should) i do\b|\bshould i (?:call|drive|take)\b|!|\?\?",
)

# Acute situations, by kind. Written for how people describe them, in the first or second person.
_SUBJ = r"(?:i|he|she|they|it|we|you|my \w+|his \w+|her \w+|the \w+)"
_SITUATIONS: dict[str, re.Pattern[str]] = {
    "not breathing or choking": _rx(
        r"\b(?:not|isn'?t|stopped|stops|stopping|barely|hardly|can'?t|cannot|can not|couldn'?t|unable to|"
        r"struggling (?:to|for)|fighting (?:to|for)|trouble|difficulty|hard to|gasping|can'?t get)\s+"
        r"(?:\w+\s+){0,2}(?:breath\w*|air)\b",
        r"\bgasp(?:ing|s)?\b|\bwheez\w*|\bchok(?:ing|ed|es)\b|\bgagging\b|\bstridor\b|\bwhistling noise\b",
        r"\b(?:lips?|face|skin|tongue|he|she|baby|child|toddler|it)\b[^.?!]{0,25}\b(?:turning|going|gone|went|"
        r"goes|turned|is|are|look(?:s|ing)?)\s+(?:\w+\s+)?(?:blue|grey|gray|purple)\b",
        r"\b(?:blue|purple) lips\b|\bturning blue\b|\bgoing grey\b",
        r"\bsucking in under\b|\bcan'?t finish a sentence\b|\bcan'?t catch (?:my|his|her) breath\b",
        r"\bwent under\b|\bfell in the (?:pool|water|river|bath)\b|\bdrown\w*",
        r"\bshort(?:ness)? of breath\b|\bbreathing (?:really |very |so )?(?:fast|weird|deep|funny|strange|rapid)\w*",
    ),
    "collapsed or unresponsive": _rx(
        r"\bunconscious\b|\bunresponsive\b|\bnot (?:responding|moving|waking)\b|\bisn'?t (?:responding|moving)\b",
        r"\b(?:won'?t|can'?t|cannot|doesn'?t|didn'?t|wouldn'?t) (?:wake|be woken|come round|respond)\b",
        r"\bwon'?t wake properly\b",
        r"\bpassed out\b|\bcollaps\w+|\bfaint(?:ed|ing)?\b|\bslumped\b|\bgone limp\b|\bwent limp\b|\bfloppy\b",
        r"\bfell (?:down|over)\b|\bon the (?:floor|ground)\b|\bnot making sense\b|\bcan'?t stay awake\b",
        r"\bgoing dark\b|\bblack(?:ing)? out\b|\bgoing to pass out\b|\bnearly fainted\b",
    ),
    "chest pain": _rx(
        r"\bchest\b[^.?!]{0,40}\b(?:pain|hurts?|hurting|pressure|tight\w*|crush\w*|squeez\w*|heavy|heaviness|"
        r"burning|ache|aching|killing|agony)\b",
        r"\b(?:pain|pressure|tight\w*|crush\w*|squeez\w*|heav\w+|burning|ache)\b[^.?!]{0,40}\b(?:chest|breastbone|"
        r"sternum)\b",
        r"\bheart attack\b|\belephant\b",
        r"\bheart (?:is |keeps )?(?:racing|pounding|skipping|going crazy|beating (?:really )?fast)\b",
        r"\bclutching (?:his|her|my) chest\b|\bholding (?:his|her|my) chest\b|\brubbing (?:his|her|my) chest\b",
    ),
    "signs of a stroke": _rx(
        r"\b(?:face|mouth|smile|eye|lip)\b[^.?!]{0,30}\b(?:droop\w*|crooked|lopsided|numb|won'?t move|"
        r"fallen|sagging|gone funny)\b",
        r"\bdroop(?:ing|y|ed)\b|\bslurr?\w*\b|\bdribbling\b|\bgibberish\b|\bmumbling\b",
        r"\b(?:speech|words|voice|talking|face|smile)\b[^.?!]{0,25}\b(?:gone (?:all )?funny|wrong|strange|different|"
        r"slurred|jumbled|muddled)\b|\bwrong words\b|\bcan'?t (?:smile|get (?:my|his|her|the) words)\b",
        r"\b(?:can'?t|cannot|unable to|won'?t)\s+(?:talk|speak|say|lift|raise|move|hold|find (?:his|her|my) "
        r"words|stand|see|feel (?:his|her|my) legs)\b",
        r"\bwords (?:are )?(?:coming out )?(?:wrong|jumbled|muddled)\b|\bwords are wrong\b",
        r"\bone side\b|\b(?:left|right) side\b[^.?!]{0,30}\b(?:weak|numb|dead|won'?t|can'?t)\b|\bhalf (?:my|his|her) "
        r"(?:face|body)\b",
        r"\b(?:worst|splitting|thunderclap|sudden (?:severe|bad|splitting)) headache\b|\bthunderclap\b",
        r"\bdouble vision\b|\bwent double\b|\bcan'?t see out of\b|\bdoesn'?t belong to me\b|\bhanging there\b",
        r"\bkeeps? dropping\b|\bfalling to one side\b|\bcan'?t say my name\b|\bhand won'?t work\b",
    ),
    "an overdose or a poison swallowed": _rx(
        r"\boverdos\w+|\bOD'?d\b",
        r"\b(?:took|taken|take|swallowed|ate|eaten|drank|drunk|downed|popped|dropped|injected|snorted|"
        r"got into|has taken|had|chewed)\b[^.?!]{0,60}\b(?:pills?|tablets?|capsules?|bottle|packet|pack|"
        r"tylenol|paracetamol|acetaminophen|ibuprofen|aspirin|insulin|bleach|poison\w*|antifreeze|pods?|"
        r"weedkiller|pesticide|battery|batteries|chemicals?|cleaner|"
        r"detergent|morphine|methadone|opioids?|oxy\w*|xanax|valium|diazepam|antidepressants?|meds|medication|"
        r"medicine|iron|digoxin|rat poison|weedkiller|too (?:much|many)|a load|a bunch|loads)\b",
        r"\btoo (?:much|many)\b[^.?!]{0,30}\b(?:pills?|tablets?|medication|meds|insulin|coke|cocaine|drugs?)\b",
        r"\b(?:did|done|taken|took|had) too much\b|\bpoisoned\b|\bneedle in (?:his|her) arm\b",
        r"\b(?:mixed|mixing)\b[^.?!]{0,30}\b(?:alcohol|drink|vodka|pills)\b",
        r"\bwhole bottle\b|\bempty (?:pill )?bottle\b|\bin (?:his|her) mouth\b",
        r"\bi just injected\b",
    ),
    "an intent to die or self-harm": _rx(
        r"\bkill (?:my|him|her|them)sel(?:f|ves)\b|\bend (?:it all|my life|his life|her life|it tonight)\b",
        r"\btake (?:my|his|her|their) own life\b|\bwant(?:s)? to die\b|\bbetter off dead\b|\bsuicid\w+",
        r"\b(?:hang|shoot|cut|stab) (?:my|him|her)sel(?:f|ves)\b|\bgoing to jump\b",
        r"\bdon'?t want to (?:be alive|live)\b",
        r"\bgoodbye (?:message|note|text)\b|\btexted (?:me )?goodbye\b|\bwritten (?:my|a) note\b|\bsleep forever\b",
        r"\bno (?:point|way out|reason to live)\b|\bgo through with it\b|\buse it on (?:my|him|her)self\b",
        r"\bself[- ]harm\b|\bcut myself\b|\bno one would miss me\b|\bcan'?t (?:do this|go on|keep going)\b",
        r"\bcar running\b|\bon the (?:roof|bridge|ledge)\b|\bstanding on the bridge\b",
        r"\bthreaten\w* to (?:jump|kill|hurt|end|take|hang|shoot|cut)\b|\bjump (?:off|from)\b",
        r"\bwant (?:it|everything) (?:all )?to (?:stop|end)\b|\bpills are (?:in front of|next to|here|ready)\b",
    ),
    "a severe allergic reaction": _rx(
        r"\banaphyla\w+|\bepi-?pen\b|\bauto-?injector\b|\badrenaline pen\b",
        r"\b(?:throat|tongue|lips?|face|mouth|eyes?)\b[^.?!]{0,25}\b(?:clos\w+|swell\w*|swollen|puff\w+|tight|"
        r"tingling)\b",
        r"\bswell(?:ing|s)? up\b|\bpuffing up\b|\bhives\b|\bblotchy\b|\bitch(?:y|ing) all over\b",
        r"\b(?:stung|sting)\b[^.?!]{0,40}\b(?:swell\w*|puff\w+|breath\w*|gasp\w*|wheez\w*)\b",
    ),
    "signs of sepsis or meningitis": _rx(
        r"\b(?:fever|temperature|temp|burning up|hot|febrile|39|40|41|flu|infection|infected|uti|pneumonia|"
        r"chemo|cellulitis|wound|catheter)\b[^.?!]{0,80}\b(?:confus\w*|floppy|"
        r"won'?t (?:wake|feed)|not making sense|mumbling|rash|spots|stiff neck|breathing (?:fast|rapid)\w*|"
        r"cold|freezing|mottled|blotchy|shiver\w*|shaking|grunting|purple|blood pressure|barely peed|peed|"
        r"worse than ever|dying)\b",
        r"\b(?:confus\w*|floppy|rash|stiff neck|shiver\w*|purple spots)\b[^.?!]{0,80}\b(?:fever|temperature|"
        r"burning up|hot)\b",
        r"\bdoesn'?t fade\b|\bdon'?t fade\b|\bnon-?blanching\b|\bglass test\b|\bred streaks\b|\bmottled\b",
        r"\bfeel like (?:i'?m dying|something terrible)\b|\bbarely peed\b|\bpurple spots\b",
    ),
    "heavy bleeding or a serious injury": _rx(
        r"\bblood everywhere\b|\bbleeding (?:heavily|a lot|badly|profusely|won'?t stop|and won'?t stop)\b",
        r"\b(?:won'?t|doesn'?t|will not) stop bleeding\b|\bspurting\b|\bsoaking (?:through )?\w+\b",
        r"\b(?:vomiting|throwing up|coughing up|coughing|spitting) (?:up )?blood\b|\bblack (?:tar|stools?|poo)\b",
        r"\bstabbed\b|\bbeen shot\b|\bgunshot\b|\bcar crash\b|\bhit by a car\b|\btrapped\b|\belectrocuted\b",
        r"\bhit (?:his|her|my|their) head\b|\bbang(?:ed)? (?:his|her|my) head\b|\blump on (?:his|her|my) head\b",
        r"\bblood (?:is )?(?:running|pouring)\b|\bbleeding\b[^.?!]{0,30}\bpregnant\b|\bpregnant\b[^.?!]{0,40}"
        r"\bbleeding\b",
        r"\bcan'?t feel (?:my|his|her) legs\b|\bhit in the chest\b",
    ),
    "a seizure": _rx(
        r"\bseiz\w+|\bfitting\b|\bconvuls\w+|\bjerking\b|\bfoaming\b|\bshaking on the (?:ground|floor)\b",
        r"\beyes (?:are )?roll\w+ back\b|\btwitching\b",
    ),
    "another acute danger": _rx(
        r"\b(?:i'?m|i am|he'?s|she'?s|he is|she is) dying\b|\bgoing to die\b",
        r"\bsugar (?:meter )?(?:says|reads) (?:hi|high|lo)\b|\bstopped sweating\b|\bheat ?stroke\b",
        r"\bsevere pain\b|\bterrible (?:stomach|belly|tummy) pain\b|\bworst pain\b",
        r"\bheart (?:is )?skipping\b|\bblood pressure (?:reading )?(?:is )?(?:\d+ over \d+|really low)\b",
    ),
}


# Signs that alone are not an emergency but two together, in someone now, are ("drowsy and vomited twice",
# "not feeding and very sleepy", "coughing and going pale"): each distinct kind counts once.
_SIGNS: dict[str, re.Pattern[str]] = {
    "drowsy": _rx(r"\bdrows\w+|\bsleepy\b|\bhard to wake\b|\bheavy\b|\blethargic\b|\bout of it\b"),
    "confused": _rx(
        r"\bconfus\w+|\bdisorient\w+|\bnot making sense\b|\bacting (?:strange|weird|odd)\w*|\bhallucinat\w+",
        r"\bnot really responding\b|\bnot himself\b|\bnot herself\b|\bslow to respond\b|\bstrange\b",
    ),
    "pale": _rx(
        r"\b(?:is|'s|are|looks?|looking|going|gone|turned|turning|very|so|all) (?:pale|white|grey|gray|ashen)\b",
        r"\bpale\b|\bclammy\b|\bsweat\w*",
    ),
    "vomiting": _rx(r"\bvomit\w*|\bthrowing up\b|\bthrew up\b|\bbeing sick\b|\bbeen sick\b"),
    "fever": _rx(r"\bfever\w*|\btemp(?:erature)?\b|\bburning (?:up|hot)\b|\b3[89](?:\.\d)?\b|\b4[01](?:\.\d)?\b"),
    "cold": _rx(r"\b(?:ice|icy|very|so|freezing) cold\b|\bfreezing\b|\bshiver\w*|\bshaking\b|\brigors?\b"),
    "breathing": _rx(
        r"\bbreath\w* (?:slow|fast|quick\w*|funny|weird|noisy|shallow|strange)\w*|\bwheez\w*|\bcoughing\b",
        r"\bcan'?t get (?:enough )?air\b|\bribs (?:are )?pulling\b|\bgrunting\b",
    ),
    "faint": _rx(r"\bdizz\w+|\bfaint\w*|\blight-?headed\b|\bpass(?:ing)? out\b|\bcollaps\w+|\bfell\b|\bfall(?:en)?\b"),
    "not feeding": _rx(
        r"\bnot (?:feeding|eating|drinking)\b|\bwon'?t (?:feed|eat|drink)\b|\bnot peed\b|\bno wet nappies\b"
    ),
    "weak or numb": _rx(
        r"\bnumb\w*|\btingl\w*|\bweak\w*|\bflopp\w+|\bfloppy\b|\blimp\b|\bwon'?t work\b|\bgone (?:all )?funny\b",
        r"\b(?:speech|words|voice|talking|face|smile|arm|leg|hand|side)\b[^.?!]{0,25}\b(?:funny|wrong|strange|"
        r"different|slurred|flopping|dropping|drooping|won'?t|can'?t|isn'?t)\b",
        r"\b(?:can'?t|cannot|unable to)\s+(?:\w+\s+)?(?:smile|talk|speak|walk|stand|see|"
        r"get (?:my|his|her|the) words)\b",
        r"\bwrong words\b|\bfell sideways\b",
    ),
    "severe pain": _rx(
        r"\b(?:worst|terrible|severe|unbearable|excruciating|crushing|splitting|agoni\w+|agony)\b[^.?!]{0,20}\b"
        r"(?:pain|ache|headache|cramp\w*)\b",
        r"\b(?:pain|ache)\b[^.?!]{0,20}\b(?:worst|ever|unbearable|agony)\b|\bhead pain\b",
        r"\bweight on (?:his|her|my) chest\b",
    ),
    "swelling": _rx(r"\bswell\w*|\bswollen\b|\bpuff\w+|\bhives\b|\bthick\b|\bhuge\b"),
    "bleeding": _rx(r"\bbleed\w*|\bblood\b"),
    "swallowed something": _rx(
        r"\b(?:ate|eaten|eating|drank|drunk|drinking|swallowed|swallowing|chewing|chewed|took|taken|put on|"
        r"injected|licked)\b[^.?!]{0,40}\b(?:by mistake|accidentally|don'?t know how many|battery|batteries|"
        r"magnets?|pills?|tablets?|patches|chemicals?|cleaner|weedkiller|pesticide|mushrooms?|berries|"
        r"ketamine|mdma|ecstasy|cocaine|coke|heroin|fentanyl|spice|gbl|ghb|cough syrup|e-?liquid|vape)\b",
        r"\bby mistake\b|\baccidentally\b|\bdon'?t know how many\b|\bone is missing\b",
    ),
    "small child": _rx(r"\bbaby\b|\bnewborn\b|\binfant\b|\b\d+ (?:weeks?|months?) old\b|\(\d+ months?\)"),
    "drowning or trauma": _rx(
        r"\bpulled (?:him|her|them) out\b|\bpulled out of\b|\bunder ?water\b|\bfell (?:from|off|down|onto)\b",
        r"\bonto (?:his|her|my) head\b|\bhit by\b|\bthreaten\w* to\b|\bhurt (?:my|him|her)self\b",
        r"\bwant (?:it|everything) (?:all )?to stop\b|\bpills are (?:in front of|next to|here)\b",
    ),
}


@dataclass(frozen=True)
class Cue:
    kind: str
    text: str


@dataclass(frozen=True)
class EmergencyVerdict:
    """What the guard found in a message; ``emergency`` decides, ``reason`` says why in words."""

    emergency: bool
    reason: str
    situation: str | None = None
    person: str | None = None
    cues: list[Cue] = field(default_factory=list)
    rule: str = "none"  # which rule decided: intent, acute, clinician, framed, history, topic, absent, none
    probability: float | None = None  # the semantic model's, when it ran


def _first(pattern: re.Pattern[str], text: str) -> str | None:
    m = pattern.search(text)
    return m.group(0).strip() if m else None


def _normalise(text: str) -> str:
    text = text.replace("\u2019", "'").replace("\u2018", "'").replace("`", "'")
    return re.sub(r"\s+", " ", text).strip()


def rule_verdict(text: str) -> EmergencyVerdict:
    """The linguistic rules' verdict on one message (a question, a follow-up)."""
    t = _normalise(text)
    found = {kind: m for kind, p in _SITUATIONS.items() if (m := _first(p, t))}
    signs = {kind: m for kind, p in _SIGNS.items() if (m := _first(p, t))}
    if not found and len(signs) >= 2:  # several lesser signs together make one acute situation
        found = {"several danger signs together": ", ".join(signs.values())}
    if not found:
        return EmergencyVerdict(False, "no acute situation described", rule="none")
    situation = next(iter(found))
    cues = [Cue(f"situation: {k}", v) for k, v in found.items()]
    clinician = _first(_CLINICIAN, t)
    research = _first(_RESEARCH, t)
    past = _first(_PAST, t)
    now = _first(_NOW, t)
    bystander = _first(_BYSTANDER, t)
    first = _first(_FIRST_PERSON, t)
    person = "someone with the writer" if bystander else "the writer" if first else None
    if person:
        cues.append(Cue(f"person: {person}", bystander or first or ""))
    if now:
        cues.append(Cue("now", now))

    self_harm = found.get("an intent to die or self-harm")
    if self_harm and not (person or now):  # "suicide prevention in schizophrenia": a topic, no one in it
        return EmergencyVerdict(False, f"{situation} named as a topic, no one in it now", situation, None, rule="topic")
    topic_word = re.fullmatch(r"suicides?|self[- ]harm", self_harm or "", re.IGNORECASE)
    if self_harm and first and not clinician and not past and not (topic_word and research):
        # A stated intent to die in the first person, whatever the rest of the message asks (but "I study
        # suicide in adolescents" names a topic of research).
        return _verdict(True, "intent to die", situation, person, cues, "intent")
    framing = clinician or research
    if framing:
        cues.append(Cue("question framing", framing))
        # Framed as a question about care or research: an emergency only if it is also told in the
        # first person, here and now, with more than one sign of danger (a clinician asks about one).
        urgent_self = bool(first and now and not clinician and len(found) >= 2 and not past)
        if not urgent_self:
            return EmergencyVerdict(
                False,
                f"a question about {situation}, not a person in it now",
                situation,
                person,
                cues,
                "clinician" if clinician else "framed",
            )
    if past and not now:
        return EmergencyVerdict(False, f"{situation} told as history ({past!r})", situation, person, cues, "history")
    if person is None and not now and not self_harm:
        return EmergencyVerdict(False, f"{situation} named, but no one in it now", situation, None, cues, "absent")
    return _verdict(True, "acute situation", situation, person, cues, "acute")


def _verdict(
    emergency: bool, why: str, situation: str, person: str | None, cues: list[Cue], rule: str
) -> EmergencyVerdict:
    return EmergencyVerdict(emergency, _reason(why, situation, person, cues), situation, person, cues, rule)


def _reason(why: str, situation: str | None, person: str | None, cues: list[Cue]) -> str:
    who = f" happening to {person}" if person else ""
    when = ", now" if any(c.kind == "now" for c in cues) else ""
    said = "; ".join(f"{c.kind} ({c.text!r})" for c in cues)
    return f"{why}: {situation or 'an acute situation'}{who}{when}" + (f" — cues: {said}" if said else "")


# ------------------------------------------------------------------------------------------ semantic model


def guard_embedding_settings(settings: SafetySettings) -> EmbeddingSettings:
    """The embedding the guard's model reads: its own small model, on CPU, whatever the embedder uses."""
    return EmbeddingSettings(model=settings.guard_model, device="cpu", backend="auto")  # type: ignore[call-arg]


@dataclass(frozen=True)
class SemanticWeights:
    model: str
    coef: npt.NDArray[np.float32]
    intercept: float
    threshold: float

    @classmethod
    def load(cls, path: Path = GUARD_WEIGHTS) -> SemanticWeights:
        raw = json.loads(path.read_text())
        return cls(
            str(raw["model"]),
            np.asarray(raw["coef"], dtype=np.float32),
            float(raw["intercept"]),
            float(raw["threshold"]),
        )

    def probability(self, vector: npt.NDArray[np.float32]) -> float:
        z = float(vector @ self.coef) + self.intercept
        return 1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, z))))


class EmergencyGuard:
    """The guard: the rules, and the semantic model where it is configured and loads."""

    def __init__(self, settings: SafetySettings | None = None, embedder: object | None = None):
        self.settings = settings or SafetySettings()  # type: ignore[call-arg]
        self.weights: SemanticWeights | None = None
        self._embedder = embedder
        self._lock = threading.Lock()
        if self.settings.semantic:
            try:
                weights = SemanticWeights.load()
            except (OSError, ValueError, KeyError) as exc:
                log.warning("emergency guard: no semantic weights (%s); rules only", exc)
            else:
                if weights.model != self.settings.guard_model:
                    log.warning(
                        "emergency guard: weights trained for %s, not %s; rules only",
                        weights.model,
                        self.settings.guard_model,
                    )
                else:
                    self.weights = weights

    @property
    def semantic(self) -> bool:
        return self.weights is not None

    @property
    def threshold(self) -> float | None:
        if self.weights is None:
            return None
        return self.settings.threshold if self.settings.threshold is not None else self.weights.threshold

    def _encoder(self) -> object:
        with self._lock:
            if self._embedder is None:
                from shared.embedding.factory import get_embedder

                self._embedder = get_embedder(guard_embedding_settings(self.settings))
            return self._embedder

    def probabilities(self, texts: list[str]) -> list[float] | None:
        """The semantic model's probability that each text is an emergency; None without the model."""
        if self.weights is None:
            return None
        try:
            vectors = np.asarray(self._encoder().encode_queries(texts), dtype=np.float32)  # type: ignore[attr-defined]
        except Exception:  # a model that cannot load or run leaves the rules to decide
            log.exception("emergency guard: the semantic model failed; rules only")
            self.weights = None
            return None
        weights = self.weights
        return [weights.probability(v) for v in vectors]

    def probability(self, text: str) -> float | None:
        found = self.probabilities([text])
        return None if found is None else found[0]

    def warm_up(self) -> None:
        """Load the model now (service start), not on the first question."""
        self.probability("warm up")

    def check(self, text: str) -> EmergencyVerdict:
        """The verdict on one message. Blocking (an embedding on CPU): from async code use :meth:`acheck`."""
        return self.check_many([text])[0]

    def check_many(self, texts: list[str]) -> list[EmergencyVerdict]:
        """The verdicts on several messages, embedded in one batch."""
        found = self.probabilities(texts)
        probs: list[float | None] = list(found) if found is not None else [None] * len(texts)
        return [self._decide(t, p) for t, p in zip(texts, probs, strict=True)]

    def _decide(self, text: str, p: float | None) -> EmergencyVerdict:
        rules = rule_verdict(text)
        threshold = self.threshold
        if p is None or threshold is None:
            return rules
        score = Cue("semantic model", f"p={p:.2f}, threshold {threshold:.2f}")
        if rules.rule == "intent":
            emergency = True
        elif rules.rule == "clinician":
            emergency = False
        else:
            emergency = p >= threshold
        if emergency:
            why = "intent to die" if rules.rule == "intent" else "acute situation"
            situation = rules.situation if rules.emergency or rules.situation else None
            reason = _reason(why, situation, rules.person, [*rules.cues, score])
        else:
            reason = f"{rules.reason} ({score.kind}: {score.text})"
        return EmergencyVerdict(emergency, reason, rules.situation, rules.person, [*rules.cues, score], rules.rule, p)

    async def acheck(self, text: str) -> EmergencyVerdict:
        return await asyncio.to_thread(self.check, text)


_DEFAULT: EmergencyGuard | None = None
_DEFAULT_LOCK = threading.Lock()


def default_guard() -> EmergencyGuard:
    """The process-wide guard, configured from the environment (``EVIDENTIA_SAFETY_*``)."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            from shared.settings import get_settings

            _DEFAULT = EmergencyGuard(get_settings().safety)
        return _DEFAULT


def check_emergency(text: str) -> EmergencyVerdict:
    """The guard's verdict on one message (blocking; see :meth:`EmergencyGuard.acheck`)."""
    return default_guard().check(text)


async def acheck_emergency(text: str) -> EmergencyVerdict:
    """The guard's verdict, computed off the event loop."""
    return await default_guard().acheck(text)


def is_emergency(text: str) -> bool:
    """An urgent personal situation (someone in danger now), not a question about care or research."""
    return check_emergency(text).emergency


def emergency_reply(verdict: EmergencyVerdict, trace_id: str | None = None, took_ms: float = 0.0) -> SynthesisReply:
    """The reply to an emergency: the advice to call emergency services, and the guard's reason."""
    kwargs = {"trace_id": trace_id} if trace_id else {}
    return SynthesisReply(
        answer=EMERGENCY_ANSWER,
        numbered_answer=EMERGENCY_ANSWER,
        mode="emergency",
        disclaimer=DISCLAIMER,
        took_ms=took_ms,
        emergency=EmergencyCheck(
            reason=verdict.reason,
            situation=verdict.situation or "an acute situation",
            person=verdict.person or "unknown",
            probability=verdict.probability,
        ),
        **kwargs,
    )
