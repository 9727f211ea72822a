"""Writes village.txt: generated English-like prose for examples/train_lm.py.

The text is made here from a small grammar with a fixed seed (so it is free of any
copyright and the same on every machine): sentences about the people, animals and
places of a village, with enough regularity for a small character-level model to
learn spelling, word order and punctuation, and enough variety that memorizing it is
not trivial. Run `python3 make_village_text.py` to regenerate it (about 120 KB).
"""
import os
import random

PEOPLE = ["the miller", "the baker", "the old shepherd", "a young weaver", "the smith", "the widow",
          "the schoolmaster", "a tired carter", "the priest", "the innkeeper", "her brother",
          "the two sisters", "a stranger from the hills", "the ferryman", "the potter's son"]
ANIMALS = ["the grey mare", "a black dog", "the geese", "an old goat", "the brown cow", "a lame fox",
           "the sheep", "a crow", "the cat from the mill"]
PLACES = ["the river", "the market", "the mill", "the chapel", "the bridge", "the high meadow",
          "the forest road", "the inn", "the harbour", "the orchard", "the well", "the ford"]
TIMES = ["in the morning", "at noon", "before the rain", "after supper", "on market day",
         "when the bells rang", "at first light", "late in the evening", "during the long winter",
         "in the spring"]
VERBS_TO = ["walks to", "runs to", "hurries to", "wanders down to", "climbs up to", "comes back to",
            "rides to", "sings on the way to"]
VERBS_OBJ = ["carries", "mends", "sells", "buys", "counts", "paints", "hides", "finds", "loses", "cleans"]
THINGS = ["a basket of apples", "the broken wheel", "three loaves of bread", "a bundle of wool",
          "the silver key", "a pot of honey", "the heavy sack", "an old lantern", "a letter",
          "the fishing nets", "a jar of salt", "the red shawl"]
ADJ = ["cold", "quiet", "busy", "muddy", "bright", "empty", "crowded", "windy", "warm", "grey"]
SAYS = ["says", "whispers", "shouts", "tells the others", "laughs and says", "asks"]
QUOTES = ["the water is rising", "we will need more bread", "the road is closed", "the fox is back",
          "nobody saw the stranger", "the bells are late today", "the wheel will hold", "winter is coming early",
          "the geese know the way", "it is time to go home"]


def sentence(r):
    k = r.randrange(7)
    p, a, pl, t = r.choice(PEOPLE), r.choice(ANIMALS), r.choice(PLACES), r.choice(TIMES)
    if k == 0:
        s = f"{p} {r.choice(VERBS_TO)} {pl} {t}."
    elif k == 1:
        s = f"{t}, {p} {r.choice(VERBS_OBJ)} {r.choice(THINGS)} near {pl}."
    elif k == 2:
        s = f"{pl} is {r.choice(ADJ)} {t}, and {a} sleeps by {r.choice(PLACES)}."
    elif k == 3:
        q = r.choice(QUOTES)
        s = f"\"{q[0].upper() + q[1:]},\" {p} {r.choice(SAYS)}."
    elif k == 4:
        s = f"{a} follows {p} to {pl}, but {r.choice(PEOPLE)} does not see it."
    elif k == 5:
        s = f"{p} and {r.choice(PEOPLE)} {r.choice(VERBS_OBJ)} {r.choice(THINGS)} {t}."
    else:
        s = f"when {p} reaches {pl}, {a} is already there."
    return s if s[0] == '"' else s[0].upper() + s[1:]


def main(path=os.path.join(os.path.dirname(os.path.abspath(__file__)), "village.txt"), size=120_000):
    r = random.Random(20261129)
    out, n = [], 0
    while n < size:
        para = " ".join(sentence(r) for _ in range(r.randint(3, 7)))
        out.append(para)
        n += len(para) + 2
    with open(path, "w", encoding="ascii") as f:
        f.write("\n\n".join(out) + "\n")


if __name__ == "__main__":
    main()
