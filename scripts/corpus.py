"""The corpus paragraphs exactly as flowline's split_paragraphs() makes them.

A paragraph is a run of lines separated by lines holding only white space (space, tab, CR, FF, VT),
trimmed of that white space at both ends; a byte-order mark at the start of a file is skipped. Files are
read as bytes, so CR LF line ends stay in the text, as flowline keeps them.
"""
import pathlib

BOOKS = ["alice-in-wonderland.txt", "northanger-abbey.txt", "persuasion.txt", "the-lost-world.txt",
         "the-valley-of-fear.txt"]
WS = " \t\r\f\v\n"


def paragraphs(text):
    if text.startswith("\ufeff"):
        text = text[1:]
    out, current = [], []
    for line in text.split("\n"):
        if line.strip(WS) == "":
            if current:
                out.append("\n".join(current).strip(WS))
            current = []
        else:
            current.append(line)
    if current:
        out.append("\n".join(current).strip(WS))
    return [p for p in out if p]


def corpus(corpus_dir):
    """[(book, index, text)] for every paragraph of the five books, in book order."""
    items = []
    for book in BOOKS:
        text = pathlib.Path(corpus_dir, book).read_bytes().decode("utf-8")
        items += [(book, i, p) for i, p in enumerate(paragraphs(text))]
    return items


HARD_CASES = [
    "",
    "   \t\n  ",
    "Crème brûlée à la française, naïve café, Ångström, Øresund, ĳssel, İstanbul",
    "日本語のテキストと中文字符混合 with English 한국어",
    "Emoji 😀👍🏽 and flags 🇫🇷 and a family 👨‍👩‍👧",
    "ΟΔΥΣΣΕΥΣ and ΣΟΦΟΣ end in capital sigma; σοφός in lower case",
    "control\u0001chars\u0007and\u200bzero\u200dwidth\u200cjoiners\ufeffbom",
    "line\u2028separator and\u2029paragraph separator and\u00a0nbsp and\u3000ideographic space",
    "a" * 101 + " " + "b" * 100 + " supercalifragilisticexpialidocious" * 3,
    "Pneumonoultramicroscopicsilicovolcanoconiosis is " + "x" * 150,
    "Punctuation: ¿¡«»—–…‘’“”·•§¶†‡※ and ASCII $+<=>^`|~ symbols",
    "Numbers 3.14159, 1,000,000 and 2026-11-22T04:27:00Z",
    "MiXeD CaSe WoRdS and ALL CAPS SHOUTING",
    "tabs\tand\r\nwindows line ends\rand old mac ones",
    "\ufffd replacement char and \x00 nul",
    "Ｆｕｌｌｗｉｄｔｈ ｌｅｔｔｅｒｓ and ｶﾀｶﾅ half-width",
    "Combining: e\u0301 a\u0308 n\u0303 and precomposed é ä ñ",
    "Mathematical 𝐁𝐨𝐥𝐝 and ℌ𝔢𝔩𝔩𝔬 and ① ② ③ and ™ ©",
    "Arabic مرحبا بالعالم and Hebrew שלום and Devanagari नमस्ते",
    "CJK compatibility 豈 更 車 and extension 𠀀 𪜀",
    "Using a GPU allows you to significantly speed up encoding.",
    " ".join(["word"] * 400),
]
