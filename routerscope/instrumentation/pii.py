"""Personal data never leaves in telemetry: identifiers that look like an e-mail address, a phone
number or a card number are replaced by a stable keyed hash before they enter a span, an event, a label or
the request-text store. (Request and answer text never enter events in the first place; `has_pii` is
a flag only.)

Joins depend on this being a function: the same input always gives the same output, wherever it is
applied (decision events, labels, the request-text store), and scrubbing a scrubbed value changes
nothing. It is also narrow on purpose, so that ids which are not personal data keep their value:

* e-mail: `local@domain.tld` anywhere in the value;
* card: 14–19 digits (a single separator between groups allowed, other groups around them
  ignored) that pass the Luhn check and start like a card number (Visa, Mastercard, Amex, Discover,
  JCB, Diners, UnionPay);
  13-digit Visa numbers are no longer issued, so a 13-digit id (a millisecond timestamp) is not a card;
* phone: `+` (or `00`) followed by 8–15 digits (E.164, separators allowed); or 9–12 digits written in phone
  groups (spaces, dots, hyphens or parentheses between groups of at most 5 digits, e.g.
  `020 7946 0958`, `(555) 123-4567`), or an area code after a trunk `0` and the number (`030/12345678`);
  or a bare run of exactly 10 or 11 digits (a national number), 12 after a trunk `0`.

Everything is read after NFKC (fullwidth digits, `＠`, no-break spaces), with the digits of any script
as digits and any whitespace, `_` or `/` between groups as a separator (`normalize`); e-mail domains
may be in any script or punycode; `task_type` is hashed as `redacted_<hash>` (`scrub_task_type`), which
keeps its contract pattern.

So `req-20261130-123456789` (two groups of 8 and 9 digits), a 13-digit numeric id, a UUID and a date
are kept as they are. Canonical UUIDs anywhere in the value are ignored before looking.

The hash is HMAC-SHA256 under a per-deployment secret, `ROUTERSCOPE_HOME/pii.key` (32 random bytes
as 64 hex digits, created on first use, readable by its owner only). A key file shorter than 32 bytes
or readable by anyone but its owner is refused with one line saying how to fix it: never an empty key,
which anyone could compute with. An unkeyed hash would not protect these values:
phone and card numbers are few enough to enumerate, so anyone could hash every candidate and look
the results up. With the key, the same identifier still hashes the same way within a deployment
(sessions keep grouping), and without it nothing can be recovered.

Rotation: stop the routers, replace (or delete) `pii.key`, start them again. Hashes written before
and after no longer match, so one identifier seen on both sides of the rotation appears as two
sessions; nothing else changes. Keep the file out of backups that leave the deployment.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import html
import ipaddress
import logging
import os
import re
import secrets
import stat
import threading
import unicodedata
from pathlib import Path
from typing import TypeVar

import msgspec

from routerscope.core.errors import ConfigError
from routerscope.core.settings import Settings

log = logging.getLogger("routerscope.instrumentation.pii")
# a text field that may be absent: the scrubbing functions give back what they were given (a str stays a str)
_Text = TypeVar("_Text", str, None)

# Local part and domain in any script (`müller@bücher.de`, `用户@例子.广告`) or punycode; read after NFKC.
EMAIL = re.compile(r"[\w.%+-]+@[\w-]+(?:\.[\w-]+)*\.(?:[^\W\d_]{2,}|xn--[a-z0-9-]+)", re.IGNORECASE)
UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
# A number as people write one: digits, with at most one separator (or a parenthesised group) between them.
NUMBER = re.compile(r"\+?\(?\d(?:(?:[ .\-]|\) ?|[ .\-]?\()?\d)*\)?")
REDACTED = re.compile(r"redacted-[0-9a-f]{16}")
# An id too long to keep, replaced by its keyed hash (`hashed_id`): already scrubbed, whatever its hex spells.
HASHED = re.compile(r"hashed-[0-9a-f]{32}")
# Visa, Mastercard (51–55, 2221–2720), Amex, Discover, UnionPay, JCB, Diners, Mir (2200–2204), Maestro (50,
# 56–69), RuPay (60, 65, 81, 82, 508, 353, 356)
CARD_PREFIXES = re.compile(
    r"4|5[1-5]|2(?:22[1-9]|2[3-9]\d|[3-6]\d\d|7[01]\d|720)|3[47]|6(?:011|5|4[4-9]|2)|35"
    r"|3(?:0[0-5]|[689])|220[0-4]|5[06-9]|6\d|8[12]|508|35[36]"
)
# Maestro numbers run from 12 digits; every other scheme's from 14.
MAESTRO_PREFIXES = re.compile(r"5[06-9]|6")


KEY_FILE = "pii.key"
MIN_KEY_BYTES = 32
_key: bytes | None = None
_key_lock = threading.Lock()


class PiiKeyError(ConfigError):
    """`pii.key` cannot be used (too short, not hex, readable by others, not a file); the message says
    how to fix it."""


class PiiKeyUnwritable(PiiKeyError):
    """A new `pii.key` cannot be written (a full disk, a read-only home): a fault of the disk, not a setting."""

    exit_code = 1


def _read_key(path: Path) -> bytes | None:
    """The key in `path` (None when there is no such file), refused unless it is owner-only and
    at least MIN_KEY_BYTES long."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO in its place must not hang the caller
    except FileNotFoundError:
        if os.path.islink(path):
            raise PiiKeyError(
                f"the PII key {path} is a symbolic link to {os.readlink(path)}, which does not exist: restore "
                "the deployment's key there, or remove the link for a new key"
            ) from None
        return None
    except OSError as exc:
        raise PiiKeyError(f"the PII key {path} cannot be opened ({exc.strerror}): check it and its directory") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
            raise PiiKeyError(
                f"the PII key {path} is {kind}: move it away (a new key is then created), or put the "
                "deployment's key file there"
            )
        try:
            text = os.read(fd, 4096).decode("ascii", "replace").strip()
        except OSError as exc:
            raise PiiKeyError(f"the PII key {path} cannot be read ({exc.strerror}): check the file") from None
    finally:
        os.close(fd)
    if mode & 0o077:
        raise PiiKeyError(
            f"the PII key {path} can be read by others than its owner (mode {stat.S_IMODE(mode):o}): "
            f"run `chmod 600 {path}` (and check who read it; if anyone may have, delete it for a new key)"
        )
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) < MIN_KEY_BYTES:
        raise PiiKeyError(
            f"the PII key {path} holds {len(key)} usable bytes, at least {MIN_KEY_BYTES} are needed "
            "(64 hex digits): restore the deployment's key, or delete the file for a new one "
            "(identifiers hashed before then will hash differently)"
        )
    return key


def load_key(home: Path, _attempts: int = 3) -> bytes:
    """The deployment's secret under `home`, created if it does not exist yet: written to a file of
    its own, synced, then linked into place, so a process starting at the same moment sees either no
    key or the whole key, never an empty or partial one (the first link wins; the others use it).
    A key that cannot be written (a full disk, a read-only home) is one line (`PiiKeyUnwritable`)."""
    path = Path(home) / KEY_FILE
    key = _read_key(path)
    if key is not None:
        return key
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.with_name(f".{KEY_FILE}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            try:
                data = (secrets.token_bytes(MIN_KEY_BYTES).hex() + "\n").encode()
                if os.write(fd, data) != len(data):
                    raise OSError(28, "No space left on device")  # a short write: the disk filled up
                os.fsync(fd)
            finally:
                os.close(fd)
            try:
                os.link(tmp, path)
            except FileExistsError:  # another process linked its key first: use theirs
                pass
            _sync_directory(path.parent)
        finally:
            tmp.unlink(missing_ok=True)
    except OSError as exc:
        raise PiiKeyUnwritable(
            f"cannot create the PII key {path} ({exc.strerror or exc}): free space on the disk under "
            f"{path.parent} (or make it writable), or put the deployment's key there"
        ) from None
    key = _read_key(path)
    if key is None:  # removed between our link and this read (a rotation under us): once more
        if _attempts <= 1:
            raise PiiKeyError(f"the PII key {path} keeps vanishing as it is created: check what removes it")
        return load_key(home, _attempts - 1)
    return key


def _sync_directory(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def configure(home: Path | None = None, key: bytes | None = None) -> None:
    """Use `key`, or the secret under `home` (default: the settings' home) for every later scrub.
    Raises PiiKeyError (one line saying how to fix it) for a key file that cannot be used."""
    global _key
    if key is None:
        if home is None:
            home = Settings.from_env().home
        key = load_key(home)
    if len(key) < MIN_KEY_BYTES:
        raise PiiKeyError(f"a PII key needs at least {MIN_KEY_BYTES} bytes, not {len(key)}")
    with _key_lock:
        _key = key


def _current_key() -> bytes:
    if _key is None:
        try:
            configure()
        except Exception as exc:  # no usable home or key: a key of this process only, never unkeyed or empty
            log.error("%s; until then identifiers are hashed with a key of this process only", exc)
            with _key_lock:
                globals()["_key"] = _key or secrets.token_bytes(MIN_KEY_BYTES)
    return _key  # type: ignore[return-value]


def _luhn(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _is_card(run: str, digits: str) -> bool:
    """Any consecutive groups of the run (`4111 1111 1111 1111-2` holds a card) make a card number."""
    if len(digits) < 12 or any(c in run for c in "+()"):
        return False
    groups = re.findall(r"\d+", run)
    for i in range(len(groups)):
        number = ""
        for group in groups[i:]:
            number += group
            if len(number) > 19:
                break
            if (len(number) >= 14 or (len(number) >= 12 and MAESTRO_PREFIXES.match(number))) and (
                CARD_PREFIXES.match(number) and _luhn(number)
            ):
                return True
    return False


def _is_phone(run: str, digits: str) -> bool:
    """A phone number in the run, alone or with other groups after it (`(555) 123-4567-000`)."""
    groups = re.findall(r"\d+", run)
    if run.startswith("+") or (run.startswith("00") and len(groups) > 1):
        skip = 0 if run.startswith("+") else 2  # 00 is the international prefix written out
        n = 0
        for group in groups:
            n += len(group)
            if 8 <= n - skip <= 15:
                return True
        return False
    if len(groups) == 1:  # a national number: 10 or 11 digits, 12 after a trunk prefix (`015112345678`)
        return len(digits) in (10, 11) or (len(digits) == 12 and digits.startswith("0"))
    # a national number with its area code written apart: `030/12345678`, `0151 12345678`
    if groups[0].startswith("0") and 2 <= len(groups[0]) <= 5 and 9 <= len(groups[0]) + len(groups[1]) <= 12:
        return True
    for i in range(len(groups)):
        n = 0
        for j, group in enumerate(groups[i:]):
            if len(group) > 5:
                break
            n += len(group)
            if j >= 1 and 9 <= n <= 12:
                return True
    return False


# Separators people put between digit groups beyond the ones NUMBER reads: any whitespace (the no-break and
# thin spaces NFKC leaves as spaces, tabs), `_`, `/`, `,`, every dash (en and em dashes, the non-breaking and
# figure hyphens, the minus sign), middle dots and bullets; a run of them (`555  123  4567`) reads as one space.
_SEPARATORS = re.compile(r"[\s_/,\u00b7\u2010-\u2015\u2022\u2027\u2212\u2219\u22c5\u30fb\ufe58\ufe63\uff0d\uff65-]+")
# Characters that change nothing on screen and hide a value from a pattern: zero-width spaces and joiners,
# the soft hyphen, the word joiner, the byte-order mark.
_INVISIBLE = re.compile("[\u00ad\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\ufeff]")


def normalize(value: str) -> str:
    """The value as the patterns read it: NFKC first (fullwidth digits and `＠`, no-break spaces), invisible
    characters removed, then every decimal digit of any script as its ASCII digit."""
    value = unicodedata.normalize("NFKC", value)
    if not value.isascii():
        value = _INVISIBLE.sub("", value)
        value = "".join(str(unicodedata.decimal(ch)) if ch.isdecimal() and not ch.isascii() else ch for ch in value)
    return value


def _digits(value: str) -> int:
    return sum(map(str.isdigit, value))


# An e-mail address in any shape people write one (read after `normalize`): the usual `local@domain.tld`,
# a quoted local part (`"jo doe"@example.com`), an IP-literal domain (`jo@[192.0.2.1]`), a domain without a
# TLD (`jo@localhost`), spaces around the `@`, or half of one (`jo.doe@` / `@example.com`, an address split
# across two fields): any `@` with a word, a quote or a bracket next to it.
AT = re.compile(r"[\w\"\]\)]\s*@|@\s*[\w\[\"]")
# The `@` and `.` written out: `jo [at] example [dot] com`, `jo(at)example.com`, `jo at example dot com`.
AT_WORD = re.compile(
    r"\w\s*[\[\(\{<]\s*at\s*[\]\)\}>]\s*\w|\w\s+at\s+[\w-]+\s*(?:[\[\(\{<]\s*dot\s*[\]\)\}>]|\s+dot\s+|\.)\s*[a-z]{2,}",
    re.IGNORECASE,
)
# IBAN: country, check digits, 11–30 letters or digits (spaces allowed between groups); checked mod 97.
IBAN = re.compile(r"(?<![A-Z0-9])[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}(?![A-Z0-9])")
IPV4 = re.compile(r"(?<![\w.])(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})(?![\d]|\.\d)")
MAC = re.compile(r"(?<![0-9A-Fa-f:-])[0-9A-Fa-f]{2}([:-])(?:[0-9A-Fa-f]{2}\1){4}[0-9A-Fa-f]{2}(?![0-9A-Fa-f:-])")
IPV6 = re.compile(r"(?<![\w:])[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}(?::\d{1,3}(?:\.\d{1,3}){3})?(?![\w:])")
# National ids that are not numbers alone: the UK's National Insurance number, India's PAN.
NATIONAL_ID = re.compile(r"(?<![A-Z0-9])(?:[A-Z]{2} ?\d{2} ?\d{2} ?\d{2} ?[A-D]|[A-Z]{5}\d{4}[A-Z])(?![A-Z0-9])")
# Encoded forms: percent-encoding (`%40`, up to three times over), HTML entities (`&#64;`, `&commat;`), escapes
# (`\u0040`, `\x40`), hex and base64 (a token of 16 or more of their characters, read back when it decodes
# to text).
_PERCENT = re.compile(r"%[0-9A-Fa-f]{2}")
_ESCAPE = re.compile(r"\\u([0-9A-Fa-f]{4})|\\x([0-9A-Fa-f]{2})")
_BASE64 = re.compile(r"[A-Za-z0-9+/_-]{16,}={0,2}")
_HEX = re.compile(r"(?<![0-9A-Fa-f])(?:[0-9A-Fa-f]{2}){8,}(?![0-9A-Fa-f])")


def _iban(text: str) -> bool:
    for match in IBAN.finditer(text.upper()):
        iban = match.group().replace(" ", "")
        number = "".join(str(int(ch, 36)) for ch in iban[4:] + iban[:4])
        if int(number) % 97 == 1:
            return True
    return False


def _ip(text: str) -> bool:
    """An IPv4 (any valid dotted quad not glued to a word: `v1.2.3.4` is a version) or IPv6 or MAC address."""
    for match in IPV4.finditer(text):
        if all(int(g) <= 255 for g in match.groups()):
            return True
    if MAC.search(text):
        return True
    if text.count(":") >= 2:
        for match in IPV6.finditer(text):
            try:
                ipaddress.IPv6Address(match.group())
            except ValueError:
                continue
            return True
    return False


def _china_id(digits: str) -> bool:
    """A resident id of the People's Republic of China: 17 digits and a check character, a birth date in the
    middle (its check character is not required to be right: a mistyped id is still personal)."""
    if len(digits) != 18 or digits[6:8] not in ("19", "20") or not digits[:17].isdigit():
        return False
    month, day = int(digits[10:12]), int(digits[12:14])
    return 1 <= month <= 12 and 1 <= day <= 31


def _decoded(value: str) -> list[str]:
    """The value's encoded forms read back (percent-encoding, HTML entities, escapes, base64 tokens)."""
    out = []
    text = value
    for _ in range(3):  # encoded more than once: `%2540` is `%40` is `@`
        if "%" not in text or not _PERCENT.search(text):
            break
        text = _PERCENT.sub(lambda m: chr(int(m.group()[1:], 16)), text)
    if "&" in text:
        text = html.unescape(text)
    if "\\" in text:
        text = _ESCAPE.sub(lambda m: chr(int(m.group(1) or m.group(2), 16)), text)
    if "=40" in text.upper():  # quoted-printable `@`
        text = re.sub("=40", "@", text, flags=re.IGNORECASE)
    if text != value:
        out.append(normalize(text))
    for match in _HEX.finditer(value):  # hex-encoded text
        try:
            plain = bytes.fromhex(match.group()).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            continue
        if plain.isprintable():
            out.append(normalize(plain))
    for match in _BASE64.finditer(value):
        token = match.group()
        for decode in (base64.b64decode, base64.urlsafe_b64decode):
            try:
                raw = decode(token + "=" * (-len(token) % 4))
                plain = raw.decode("utf-8")
            except (ValueError, UnicodeDecodeError):
                continue
            if plain.isprintable():
                out.append(normalize(plain))
                break
    return out


_CHINA_ID = re.compile(r"(?<!\d)\d{17}[Xx](?!\w)")


def _numbers_personal(value: str) -> bool:
    value = _SEPARATORS.sub(" ", UUID.sub("-", value))
    for match in NUMBER.finditer(value):
        run = match.group().rstrip(")")
        digits = "".join(ch for ch in run if ch.isdigit())
        if len(digits) < 8:
            continue
        if _is_card(run, digits) or _is_phone(run, digits):
            return True
        if " " not in run.strip() and "." not in run and "-" not in run:  # one bare group of digits
            if len(digits) in (9, 12) or _china_id(digits):  # a bare SSN, Aadhaar, resident id
                return True
    if "x" in value or "X" in value:
        for match in _CHINA_ID.finditer(value):
            if _china_id(match.group().upper()):
                return True
    return False


def _plain_personal(value: str) -> bool:
    if "@" in value and AT.search(value):
        return True
    if EMAIL.search(value) or AT_WORD.search(value):
        return True
    digits = _digits(value)
    if (digits >= 4 or value.count(":") >= 2) and _ip(value):  # `fe80::1` has 3 digits
        return True
    if digits >= 4 and (_iban(value) or NATIONAL_ID.search(value.upper())):
        return True
    return digits >= 8 and _numbers_personal(value)  # every number rule needs 8 digits or more


def looks_personal(value: str) -> bool:
    """Does `value` hold personal data by any rule (docs/operations.md, "What is scrubbed")?"""
    value = normalize(value)
    if _plain_personal(value):
        return True
    return any(_plain_personal(text) for text in _decoded(value))


# Dates (and times) inside a version or a model name: `2026-11-30.1+af23` or `gpt-4o-2024-08-06` are not
# phone numbers, though their digit groups look like one.
DATE = re.compile(r"(?<!\d)\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?)?(?!\d)")


def scrub_name(value: _Text) -> _Text:
    """`scrub` for a version or a model name (`app_version`, `policy_version`, `device_model`,
    `cloud_model`): the same, except that dates in it are not taken for phone numbers."""
    if value is None or _surely_clean(value):
        return value
    if REDACTED.fullmatch(value) or HASHED.fullmatch(value) or PSEUDONYM.fullmatch(value):
        return value
    if not looks_personal(DATE.sub("-", normalize(value))):
        return value
    return _hash(value)


def _hash(value: str) -> str:
    return "redacted-" + hmac.new(_current_key(), value.encode(), hashlib.sha256).hexdigest()[:16]


def hash_value(value: str) -> str:
    """`redacted-<hash>` of `value`, whatever it holds (a value that is personal only with another one)."""
    return value if REDACTED.fullmatch(value) else _hash(value)


def hashed_id(value: str) -> str:
    """An id too long to keep, as `hashed-<32 hex>` of its keyed hash (the same id, the same value)."""
    return "hashed-" + keyed_hash(value)[:32]


def keyed_hash(value: str) -> str:
    """HMAC-SHA256 of `value` under the deployment's key, as hex (an id too long to keep is replaced by it)."""
    return hmac.new(_current_key(), value.encode(), hashlib.sha256).hexdigest()


_SUSPECT_CHARS = frozenset("@%&\\=:[({<")


def _surely_clean(value: str) -> bool:
    """True for a value no rule can take for personal data, found without running the rules: ASCII, fewer than
    4 digits, none of the characters an address or an encoding needs, no `at` word, no long base64 token."""
    return (
        value.isascii()
        and _digits(value) < 4
        and _SUSPECT_CHARS.isdisjoint(value)
        and " at " not in value.lower()
        and (len(value) < 16 or not _BASE64.search(value))
    )


def scrub(value: _Text) -> _Text:
    """The value, or `redacted-<hash>` when it looks like personal data. Same input, same output (so
    sessions still group and labels still join); a scrubbed value is returned unchanged."""
    if value is None or _surely_clean(value):
        return value
    if value.isascii() and UUID.fullmatch(value):
        return value
    if REDACTED.fullmatch(value) or HASHED.fullmatch(value) or PSEUDONYM.fullmatch(value):
        return value
    if not looks_personal(value):
        return value
    return _hash(value)


# -- identifiers: pseudonymised whatever they hold ---------------------------------------------------------
# A session id, a user-supplied request id or a labeler names a person or can be tied to one; a pattern cannot
# tell. They are replaced by `id-<24 hex>` of their keyed hash by default (the same id, the same value: sessions
# group and labels join), whether or not they look personal. `ROUTERSCOPE_PII_IDS=scrub` keeps ids that no
# pattern takes for personal data (the behaviour before; `scrub`).
PSEUDONYM = re.compile(r"id-[0-9a-f]{24}")
HASH_IDS = os.environ.get("ROUTERSCOPE_PII_IDS", "hash").strip().lower() != "scrub"


def pseudonymise(value: _Text) -> _Text:
    """`id-<24 hex>`: the keyed hash of an identifier (a session id, a labeler); our own hashes are kept."""
    if value is None:
        return value
    if not HASH_IDS:
        return scrub(value)
    if PSEUDONYM.fullmatch(value) or REDACTED.fullmatch(value) or HASHED.fullmatch(value):
        return value
    key = _current_key()
    base = _id_hmac.get(key)
    if base is None:  # the keyed state after the prefix, made once per key (a copy costs less than a new HMAC)
        _id_hmac.clear()
        base = _id_hmac[key] = hmac.new(key, b"id\x00", hashlib.sha256)
    mac = base.copy()
    mac.update(value.encode())
    return "id-" + mac.hexdigest()[:24]


_id_hmac: dict[bytes, hmac.HMAC] = {}


def pseudonymise_request_id(value: _Text) -> _Text:
    """A request id: a canonical UUID (a random id, which the SDK and our router make) is kept; any other,
    an id the application chose, is pseudonymised. Labels and the request-text store key by the same."""
    if value is None or (len(value) == 36 and UUID.fullmatch(value)):
        return value
    return pseudonymise(value)


# -- values split across fields ------------------------------------------------------------------------------
_DIGITS_ONLY = re.compile(r"[\d\s()+-]*\d{3}[\d\s()+-]*")
_NUMERIC_ONLY = re.compile(r"[^A-Za-z]*\d[^A-Za-z]*\d[^A-Za-z]*\d[^A-Za-z]*")  # no letters, 3 digits or more


def split_across(values: list[str | None]) -> set[int]:
    """Indexes of the values that are personal only together with another one: the halves of an e-mail
    address split at its `@` (`jo.doe` and `@example.com`), of a card or phone number split between its digit
    groups (`4111 1111` and `1111 1111`). A value personal on its own is scrubbed on its own."""
    out: set[int] = set()
    texts = [None if v is None else normalize(v) for v in values]
    for i, text in enumerate(texts):
        if text is None or "@" not in text:
            continue
        stripped = text.strip()
        for j, other in enumerate(texts):
            if j == i or other is None or not other.strip():
                continue
            if (stripped.startswith("@") and EMAIL.search(other.strip() + stripped)) or (
                stripped.endswith("@") and EMAIL.search(stripped + other.strip())
            ):
                out.update((i, j))
    numeric = {
        i: _SEPARATORS.sub(" ", t).strip()
        for i, t in enumerate(texts)
        if t is not None
        and _NUMERIC_ONLY.fullmatch(t)
        and _DIGITS_ONLY.fullmatch(_SEPARATORS.sub(" ", DATE.sub("", t)).strip() or "x")
    }
    if len(numeric) < 2:
        return out
    for i, first in numeric.items():
        for j, second in numeric.items():
            if i != j and (i not in out or j not in out) and _numbers_personal(f"{first} {second}"):
                out.update((i, j))
    return out


TASK_TYPE_REDACTED = re.compile(r"redacted_[0-9a-f]{16}")


def scrub_task_type(value: _Text) -> _Text:
    """`scrub` for `task_type`, whose contract pattern (`[a-z][a-z0-9_]*`) still holds digits enough for a
    phone number (`callback_0301234567`): such a value becomes `redacted_<hash>`, which fits the pattern."""
    if value is None or TASK_TYPE_REDACTED.fullmatch(value) or scrub(value) == value:
        return value
    return "redacted_" + _hash(value).removeprefix("redacted-")


# Versions and model names: scrubbed with `scrub_name` (dates in them are not phone numbers).
NAME_FIELDS = frozenset({"app_version", "policy_version", "device_model", "cloud_model"})
# Every free-text field of the events, per event type name (the rest are enums, numbers, times, UUIDs
# or patterns that cannot hold an e-mail address, a phone or a card number). An attempt carries no
# text of its own: its model is the decision's device or cloud model (and a span attribute, scrubbed
# by the SDK).
FREE_TEXT = {
    "DecisionEvent": (
        "task_type",
        "request_id",
        "session_id",
        "app_id",
        "app_version",
        "policy_version",
        "device_tier",
        "device_model",
        "cloud_model",
    ),
    "LabelEvent": ("request_id", "labeler"),
    "BreakerEvent": ("instance_id", "trigger"),
}


def scrub_event(event, scrub_one=None, *, ids: bool = False):
    """`event` with every free-text field scrubbed (`scrub_one`, default `scrub`), and the halves of an
    address or a number split across two of them hashed (`split_across`); with `ids`, its identifiers
    (`IDS`) pseudonymised whatever they hold, as the SDK records them. The same object when nothing changed."""
    scrub_one = scrub_one or scrub
    changes = {}
    kind = type(event).__name__
    names = FREE_TEXT.get(kind, ())
    for name in names:
        value = getattr(event, name, None)
        if isinstance(value, str):
            if ids and name in IDS.get(kind, ()):
                scrubbed = pseudonymise_request_id(value) if name == "request_id" else pseudonymise(value)
            elif name == "task_type":
                scrubbed = scrub_task_type(value)
            else:
                scrubbed = scrub_name(value) if name in NAME_FIELDS else scrub_one(value)
            if scrubbed is not value and scrubbed != value:
                changes[name] = scrubbed
    texts = [getattr(event, name, None) for name in names]
    texts = [t if isinstance(t, str) and names[k] != "task_type" else None for k, t in enumerate(texts)]
    for i in split_across(texts):
        if names[i] not in changes:
            changes[names[i]] = hash_value(texts[i] or "")
    return msgspec.structs.replace(event, **changes) if changes else event


# The identifiers of each event type: pseudonymised whatever they hold by the SDK (`scrub_event(ids=True)`).
IDS = {"DecisionEvent": ("request_id", "session_id"), "LabelEvent": ("request_id", "labeler")}
