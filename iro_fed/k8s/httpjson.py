"""What the extender, the webhook, the edge agent and the loopback API server share: a
JSON-over-HTTP/1.1 request handler and a server thread.

:class:`RoutedJsonHandler` (the extender, the webhook and the edge agent) is the hardened one:
strict framing (Content-Length only, digits only, repeated only with the same value, as Go's
net/http reads it; no Transfer-Encoding: it is how requests are smuggled past a proxy; no header
line that is not ``Name: value``: the stdlib would end the headers there), a body
limit checked before anything is read (and no ``100 Continue`` for a body that will not be
read), a deadline for the whole body and another for the request line and headers together
(:class:`DeadlineReader`: a client that trickles bytes cannot hold a thread), every method token
routed (405 with ``Allow``, 404), JSON replies for every error naming the field (the stdlib's
own included: 400, 408, 411, 413, 414, 431, 505), and a connection that is closed whenever the
next request's first byte is unknown, after a lingering read so that a client still sending
reads its reply; a connection that ends inside the request line or the headers is a cut request
(400), not one to serve. A server's graceful stop (:meth:`ConnectionLimit.close_idle_reads`) closes
the connections with no request started and answers the others. The headers of a request are at most ``max_header_bytes`` in all (431): the
stdlib alone takes 100 lines of 64 KiB, about 30 MB of copies per connection. A server's
:class:`ByteBudget` (``body_budget``) bounds the bytes of bodies read, parsed and answered at once,
counted as they are read, a body still arriving included (503 with ``Retry-After: 1`` past the
body deadline or ``budget_wait_s``); a body that would take more than ``max_parse_memory`` once
decoded and parsed (:func:`parse_estimate`, :func:`decode_estimate`) is refused with a 413 before
it is parsed, and what all requests parse at once is bounded by a second budget,
``parse_budget`` (``max_parse_total``, 503 as for bodies). A body of 1 MiB or more is parsed and
answered with the cyclic GC paused (:class:`_GcPause`): the same document, json's part in a third of the time.
:class:`ConnectionLimit` caps a threading server's open connections (one thread each): beyond
the cap a connection gets 503 with ``Retry-After: 1`` and is closed at once. :class:`RequestStats`
counts requests from every thread.
:func:`loads_strict` parses a body as kube's strict Go decoder would accept it (no key repeated), or names what is wrong;
:func:`loads_with_spans` does the same and says where each item of one array is in the text.
"""

from __future__ import annotations

import array
import gc
import http.client
import io
import json
import logging
import math
import os
import re
import select
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler
from json.decoder import scanstring  # type: ignore[attr-defined]
from json.encoder import encode_basestring_ascii  # type: ignore[attr-defined]
from json.scanner import make_scanner  # type: ignore[attr-defined]
from socketserver import BaseServer
from typing import Any
from urllib.parse import urlsplit

import numpy as np

log = logging.getLogger("iro_fed.k8s.http")

#: Deeper JSON than this is refused: a Pod or Node is about 10 levels deep, and the code that
#: reads a request recurses (copy.deepcopy, json.dumps), so 900 levels would end in RecursionError.
MAX_JSON_DEPTH = 100
_INT64 = (-(2**63), 2**63 - 1)
_DIGITS = re.compile(r"[0-9]{1,19}")  # ASCII only: int() also takes "+5", " 5", "5_0" and other scripts' digits
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_DRAIN_LIMIT = 1 << 20  # an error reply reads up to this much unread body to keep the connection; more: it closes
# A method is a token (RFC 9110 5.6.2); anything else is not a request line.
_METHOD = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,20}")
_BODY_METHODS = ("POST", "PUT", "PATCH")  # what a handler reads a body for
# A connection closed with a body unread is read from (and what comes dropped) for at most this
# long and this much first: see RoutedJsonHandler._linger.
_LINGER_S = 2.0
_LINGER_BYTES = 16 << 20
# A body is read (and charged to the server's body_budget) this much at a time: each read
# allocates its size before the bytes arrive, so the budget covers every byte held.
_READ_CHUNK = 256 << 10
#: What one JSON value is reckoned to take once parsed, string contents past their first bytes
#: aside (:func:`_scan` counts those). Measured with tracemalloc on CPython 3.11, per ``{``,
#: ``[`` or ``,`` of the body: 36 B for ``[{},{},...]``, 96 B for a NodeList of 5,000 kubelet
#: Nodes (2.70 M of them in 87 MiB: 246 MiB parsed), 110-122 B for the worst shapes tried
#: (``[{"a":"bc"},...]``, ``[{"a":{"b":{}}},...]``).
PARSE_VALUE_BYTES = 128
# How many bytes of a string PARSE_VALUE_BYTES covers, by where it stands (see _scan). A string
# takes 49 B and a byte a character, its slot in a list 9 B: an item is covered up to 70 bytes
# (["x...",...]). A 1-key dict takes 184 B, so its value is covered up to 6 ([{"a":"x..."},...]);
# a later key's value has a "," of its own. A key is made once for all its copies: counted as an
# item. Where 1-key dicts and 1-item lists nest, 128 B a value falls short whatever the strings:
# [{"a":["x"*300]},...] is reckoned at 0.99 of its peak, [{"a":{"b":"bc"}},...] at 0.87.
_COVERED_ITEM = 48
_COVERED_FIRST_VALUE = 4
_COVERED_VALUE = 32
# By what a run of _scan is (bits): 4 after an escaped quote, 2 a key's value, 1 whose key follows a ",".
_COVERED = np.array([_COVERED_ITEM] * 2 + [_COVERED_FIRST_VALUE, _COVERED_VALUE] + [0] * 4)
# An empty dict takes 64 B of the 128 charged to its "{": the rest may cover string contents.
_EMPTY_DICT_SPARE = 64
_EMPTY_DICT = 0x7D7B  # "{}" read as a little-endian uint16
# What loads_strict takes whatever the body (json's decoder, made for each call: 2.3-2.7 KB), which
# _scan adds where it counts strings: there the estimate is close enough to the peak to need it.
_STRINGS_FIXED = 4 << 10
_SCAN_PIECE = 128 << 10  # _scan reads a body this much at a time: at most ~3 MiB held (24 B a quote)
_KEYS_PIECE = 64 << 10  # and _keys_in_text: at most ~1.7 MiB held (a body of escaped quotes)
_COLONS_PIECE = 128 << 10  # and _keys_by_colons: at most ~1.5 MiB held (8 B a ":" after a quote)
_QUOTE, _BACKSLASH, _COLON, _COMMA, _SPACE, _BRACE, _BRACKET = b'"\\:, {['
# By byte (see _keys_by_colons), before a quote: 1 for what may come before a string's opening quote
# (JSON's whitespace, "{", "[", "," and ":"), 2 for a backslash; and JSON's whitespace that is never
# inside a string (\t, \n, \r).
_BEFORE_QUOTE = np.zeros(256, np.uint8)
_BEFORE_QUOTE[list(b' \t\n\r{[,:')] = 1
_BEFORE_QUOTE[_BACKSLASH] = 2
_KEY_WHITESPACE = np.zeros(256, bool)
_KEY_WHITESPACE[list(b'\t\n\r')] = True
_COLON_AFTER = 0x3A00  # a ":" as the high byte of a little-endian uint16: any byte before it, up to '"' (0x22)
# What a key copied per item (loads_with_spans) is charged: a str's 49 B and its first 16
# characters. The rest of its first 48 fit in what its value's charge leaves (a NodeList of 1-key
# dicts with 48-character keys: 1.02 of its parse peak); past 48, _scan counts them as any string's.
_KEY_COPY = 49
_KEY_COPY_COVERED = 16
_KEY_ENDS = list(b": \t\n\r")  # what may follow a key's closing quote: a ":" or JSON's whitespace
_AFTER_KEY = np.zeros(256, bool)  # by byte: one of _KEY_ENDS
_AFTER_KEY[_KEY_ENDS] = True
# A body up to this size is charged by its byte counts (_counted_bound), not scanned (_scan_all):
# numpy's fixed costs made the scan a third of the extender's time for a 7 KiB body.
_COUNTED_BODY = 32 << 10
_PAIRS_CHECKED = 48  # and one with at most this many "{" has its objects' pairs checked (see _loads)
_ONE_WRITE_BYTES = 64 << 10  # a reply body up to this size goes out with its headers (see JsonHandler.send_body)
_NON_ASCII = re.compile(rb"[\x80-\xff]")
#: What a body may be reckoned to take once parsed (:func:`parse_estimate`) before it is refused
#: with a 413 unparsed: ``[{},{},...]`` parses to about 24 times its size.
MAX_PARSE_MEMORY = 512 << 20
# Escapes that parse to characters CPython stores at 2 bytes (U+0100..U+FFFF; see _SURROGATE_ESCAPE for 4).
_UCS2_ESCAPE = re.compile(rb"\\u(?:0[1-9a-fA-F]|[1-9a-fA-F])")
# Each byte of UTF-8 by what it is: ASCII, a continuation, or the lead of a character of 2 bytes
# stored at 1 (U+0080..U+00FF: "l", \xc2-\xc3), of 2 or 3 bytes stored at 2, of 4 stored at 4.
_UTF8_CLASS = bytes.maketrans(bytes(range(256)), b"a" * 128 + b"c" * 64 + b"22ll" + b"2" * 28 + b"3" * 16 + b"4" * 16)
# Each lead byte of a UTF-8 character past U+00FF ("w"), which CPython stores at 2 or 4 bytes.
_WIDE_LEAD = bytes.maketrans(bytes(range(256)), b"." * 0xC4 + b"w" * (0xF5 - 0xC4) + b"." * (256 - 0xF5))
_ASTRAL_LEADS = (b"\xf0", b"\xf1", b"\xf2", b"\xf3", b"\xf4")  # of a character past U+FFFF
# How many quotes _wide_strings steps over in all before it reckons the rest of a body as wide.
_WIDE_STEPS = 1 << 16
# A body is escaped (see _ascii_text) this much at a time, so no more than one piece is ever wide.
_ESCAPE_CHUNK = 256 << 10
# Where a piece may end: before a byte that does not continue a UTF-8 character (one within 4
# bytes, or the UTF-8 is invalid there and any cut reads the same).
_CHAR_START = re.compile(rb"[^\x80-\xbf]")
_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f]")  # never valid raw in JSON (\t \n \r are whitespace)
_BACKSLASH_WIDE = re.compile(rb"\\[\x80-\xff]")
# What stands for "\" while a piece is escaped: UTF-8 never decodes to a lone surrogate.
_BACKSLASH_MARK = "\udbff"
# What encode_basestring_ascii escapes besides the non-ASCII characters, put back as sent. Each "\"
# of its output starts one of its escapes (those sent are marked), so none of these matches across
# two; the marks go back last.
_UNESCAPE = (('"', '\\"'), ("\n", "\\n"), ("\r", "\\r"), ("\t", "\\t"), ("\x7f", "\\u007f"), ("\\", "\\udbff"))
# A text this long (or longer) is parsed with the cyclic GC paused (see _GcPause): below it the
# collections cost little, and most requests never touch the switch.
_GC_PAUSE_CHARS = 1 << 20
_GC_PAUSE_MAX_S = 2.0  # how long the GC stays off while parses follow one another (see _GcPause)
_PARSE_BUDGET_LOCK = threading.Lock()  # makes a server's parse_budget once (see RoutedJsonHandler._parse_budget)


class JsonBodyError(ValueError):
    """A body that is not acceptable JSON; ``field`` is the JSON path at fault (``body`` for the whole)."""

    def __init__(self, message: str, field: str = "body") -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class HttpError(Exception):
    """An error reply: status ``code``, the ``message`` (which names the field) and the ``field``
    (header or JSON path) at fault; a 503's ``retry_after_s`` (whole seconds, at least 1) is its
    ``Retry-After`` (default 1)."""

    def __init__(self, code: int, message: str, field: str | None = None, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.field = field
        self.retry_after_s = retry_after_s


class _HugeInteger:
    """What an integer of more digits than ``int()`` converts parses to in :func:`_huge_integer`."""

    __slots__ = ()


def _huge_integer(text: str) -> JsonBodyError:
    """The error for a body whose integer has more digits than ``int()`` converts (4,300 by
    default; json's own error named Python's limit, not the field): parsed again, only on this
    path, with such integers as :class:`_HugeInteger`, which the walk names as out of range."""
    limit = sys.get_int_max_str_digits()

    def parse_int(digits: str) -> int | _HugeInteger:
        return _HugeInteger() if limit and len(digits.lstrip("-")) > limit else int(digits)

    try:
        doc = json.loads(text, parse_constant=_NonFinite, parse_int=parse_int)
        _find(doc, sys.maxsize, surrogates=False)
    except JsonBodyError as exc:
        return exc
    except (ValueError, RecursionError):
        pass
    return JsonBodyError(f"not valid JSON: an integer of more than {limit} digits")


class _NonFinite:
    """What ``NaN`` / ``Infinity`` parse to, so the walk can say where they were."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _path(parts: tuple[str | int, ...]) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else p)
    return out or "body"


def parse_estimate(raw: bytes, value_bytes: int = PARSE_VALUE_BYTES) -> tuple[int, int]:
    """``(values, bytes)``: at most how many JSON values ``raw`` holds, and what they would take
    once parsed at ``value_bytes`` each, with what their strings hold beyond that
    (:func:`_scan`). Every value but the first opens a container or follows a ``,`` (a key with
    its value counts once), so the count of ``{``, ``[`` and ``,`` plus one bounds them; those
    inside strings only make it larger. Counted with numpy, with the strings: about 0.12 s for
    the 87 MiB of a 5,000-node NodeList (three ``bytes.count`` took 0.14 s for the values alone),
    against 0.7 s and 338 MiB to parse it."""
    values, strings = _scan(raw)
    return values, values * value_bytes + strings


def parse_estimates(raw: bytes) -> tuple[int, int, int]:
    """``(values, bytes, copied)``: :func:`parse_estimate`, and what :func:`loads_with_spans`
    takes besides (``copied``): a key is made once per item there, not once for the document
    (:data:`_KEY_COPY` a key), and each item's span takes 16 B (within what its value's charge
    leaves). In one pass over ``raw``."""
    values, strings, keys = _scan_all(raw, True)
    return values, values * PARSE_VALUE_BYTES + strings, keys


def _scan(raw: bytes) -> tuple[int, int]:
    return _scan_all(raw, False)[:2]


def parse_charge(raw: bytes, keys: bool, limit: int) -> tuple[int, int, int]:
    """What :meth:`RoutedJsonHandler.read_json` charges a body: :func:`parse_estimates` (with
    ``keys``) or :func:`parse_estimate` (``copied`` 0), except that a body of at most
    :data:`_COUNTED_BODY` bytes is charged :func:`_counted_bound` where that stays within ``limit``
    (every decision against the limit is then the scan's: a 413, spans given up)."""
    return _charge(raw, keys, limit)[:3]


def _charge(raw: bytes, keys: bool, limit: int) -> tuple[int, int, int, int]:
    """:func:`parse_charge` and the :func:`decode_estimate` of its ``bytes`` (computed once)."""
    if len(raw) <= _COUNTED_BODY:
        values, strings, copied = _counted_bound(raw, keys)
        need = values * PARSE_VALUE_BYTES + strings
        decoded = decode_estimate(raw, need)
        if need + decoded + copied <= limit:
            return values, need, copied, decoded
    values, need, copied = parse_estimates(raw) if keys else (*parse_estimate(raw), 0)
    return values, need, copied, decode_estimate(raw, need)


def _counted_bound(raw: bytes, keys: bool) -> tuple[int, int, int]:
    """At least each of :func:`_scan_all`'s ``(values, strings, copied)``, from how often each byte
    comes in ``raw`` (one bincount): the values are counted alike; the strings' contents are at
    most the body, once more for what follows the last quote, and where a string is built (an
    escape, a character past U+007F) 4 times the body for :func:`_building` or the next longest;
    a key copied per item ends at a quote that a ``:`` or whitespace follows, so there are no
    more of them than of those bytes. For a 7 KiB extender body: 17 us, the scan 80-100 us (its
    numpy calls' fixed costs), and about 35 KiB over its 80 KiB."""
    counts = np.bincount(np.frombuffer(raw, np.uint8), minlength=256)
    values = 1 + int(counts[_BRACE]) + int(counts[_BRACKET]) + int(counts[_COMMA])
    built = bool(counts[_BACKSLASH]) or bool(counts[0x80:].any())
    strings = len(raw) * (6 if built else 1) + _STRINGS_FIXED
    copied = int(counts[_KEY_ENDS].sum()) * (_KEY_COPY + _KEY_COPY_COVERED) if keys else 0
    return values, strings, copied


def _scan_all(raw: bytes, keys: bool) -> tuple[int, int, int]:
    """``(values, strings, copied)``: the values of :func:`parse_estimate`, at most what the strings
    of ``raw`` take beyond what :data:`PARSE_VALUE_BYTES` a value covers, at a byte a character
    (:func:`_wide_strings` adds what wider characters take), and with ``keys`` the ``copied`` of
    :func:`parse_estimates` (else 0). Before, string contents went uncounted: one string of 8 MiB
    took 16 MiB to parse (text and string), reckoned at 8.

    A value's charge covers a string's first bytes (``_COVERED_*``), by where it stands. The runs
    of bytes between the ``"`` of ``raw`` (128 KiB of it at a time, with numpy) are told apart by
    the byte before a run's opening quote, past one space: ``:`` for a key's value, and then the
    byte before its key's, ``,`` for a later key (else the value counts as a first one); anything
    else counts as an item (a key, a run between strings such as ``", "``: a few bytes at most).
    A run after an escaped quote goes on the same string and counts whole. An empty dict
    (``{}``) takes 64 B of the 128 charged to its ``{``: the rest covers string contents (the
    23,000 of a 500-node NodeList, 1.4 MiB of its 8.7 MiB).

    json builds a string that holds an escape (in a text of :func:`_ascii_text`, a character past
    U+007F too) in a buffer a quarter longer, copied when a wider character comes
    (:func:`_building`). One is built at a time: the longest string is reckoned by what it holds,
    the next longest at the worst for all the others."""
    a = np.frombuffer(raw, np.uint8)
    n = a.size
    values, empty, extra, copied = 1, 0, 0, 0
    # Only a string that holds an escape is built (see _building): in a text of _ascii_text, every
    # character past U+007F is one.
    built = not raw.isascii() or raw.find(b"\\") >= 0
    prev = np.empty(0, np.int64)  # the last three quotes before this piece
    opened = np.empty(0, np.int64)  # the last quote before it that is not escaped
    top = [(0, 0), (0, 0)]  # the two longest strings: (bytes, where they start)
    for start in range(0, n, _SCAN_PIECE):
        piece = a[start:start + _SCAN_PIECE]
        values += sum(int(np.count_nonzero(piece == c)) for c in (_BRACE, _BRACKET, _COMMA))
        empty += _empty_dicts(a, start, start + piece.size)
        found = np.flatnonzero(piece == _QUOTE)
        if not found.size:
            continue
        q = np.concatenate((prev, found + start))
        first = max(prev.size - 1, 0)  # runs not counted yet: from q[first] on
        prev_size, prev = prev.size, q[-3:]
        before = a[q - 1]  # past one space below; and before a quote at 0, none
        if q[0] == 0:
            before[0] = 0
        escaped = before == _BACKSLASH
        if built:  # the strings: from a quote that is not escaped to the next one
            ends = q[prev_size:][~escaped[prev_size:]]
            if ends.size:
                ends = np.concatenate((opened, ends))
                opened = ends[-1:]
                spans = ends[1:] - ends[:-1] - 1
                if spans.size:
                    j = int(np.argmax(spans))
                    top.append((int(spans[j]), int(ends[j]) + 1))
                    spans[j] = -1
                    top = sorted(top + [(int(spans.max()), -1)], reverse=True)[:2]
        escaped = escaped[first:-1]
        space = np.flatnonzero(before == _SPACE)
        if space.size and q[space[0]] < 2:
            space = space[1:]  # "0" or " " before it, no further
        before[space] = a[q[space] - 2]
        # Run i is from q[i] to q[i + 1]; the key of the value in it, from q[i - 2].
        runs = q[first + 1:] - q[first:-1] - 1
        later = np.zeros(runs.size, np.uint8)
        later[max(2 - first, 0):] = before[max(first - 2, 0):-3] == _COMMA
        kind = ((before[first:-1] == _COLON).view(np.uint8) << 1) | later | (escaped.view(np.uint8) << 2)
        extra += int(np.maximum(runs - _COVERED[kind], 0).sum())
        if keys:  # a run whose closing quote a ":" or a space follows: a key (or more, never fewer)
            key = _AFTER_KEY[a[np.minimum(q[first + 1:] + 1, n - 1)]]
            copied += int(key.sum()) * _KEY_COPY + int(np.minimum(runs[key], _KEY_COPY_COVERED).sum())
    extra = max(extra - _EMPTY_DICT_SPARE * empty, 0)
    if extra:
        extra += _STRINGS_FIXED
    if not prev.size:
        return values, extra, copied
    # After the last quote, a string could only run on to the end: invalid JSON, which json
    # scans through before it says so, and builds as it goes where the string holds an escape.
    last = int(prev[-1])
    tail = n - last - 1 if raw.find(b"\\", last + 1) >= 0 else 0
    extra += tail
    if not built:
        return values, extra, copied  # json takes every string from the text as it is
    if opened.size:  # a string left open runs on to the end
        top.append((n - int(opened[0]) - 1, int(opened[0]) + 1))
    (size, at), (other, _) = sorted(top, reverse=True)[:2]
    return values, extra + max(_building(raw, at, at + size), other * 4), copied


def _empty_dicts(a: np.ndarray, start: int, end: int) -> int:
    """How many ``{}`` of ``a`` start in ``[start, end)``: both byte pairs, even and odd, read as
    uint16 (a third of the time of comparing both bytes)."""
    piece = a[start:min(end + 1, a.size)]
    even, odd = piece.size // 2 * 2, (piece.size - 1) // 2 * 2
    return int(np.count_nonzero(piece[:even].view("<u2") == _EMPTY_DICT)
               + np.count_nonzero(piece[1:1 + odd].view("<u2") == _EMPTY_DICT))


def _keys_in_text(raw: bytes) -> int:
    """How many keys the JSON text ``raw`` holds, repeated ones included: its ``:`` outside strings
    (what counts where ``raw`` is not valid JSON does not matter: it is refused). A parsed object
    holds each key once, so the document holds fewer where a key is repeated (see :func:`_loads`).
    For the bodies :func:`_keys_by_colons` cannot count. By pieces, with numpy: a ``:`` is outside
    strings where an even number of quotes that are not escaped come before it (0.15-0.27 s for the
    87 MiB of a 5,000-node NodeList)."""
    a = np.frombuffer(raw, np.uint8)
    keys = 0
    inside = 0  # 1 where the piece starts inside a string
    for start in range(0, a.size, _KEYS_PIECE):
        end = min(start + _KEYS_PIECE, a.size)
        piece = a[start:end]
        is_quote = piece == _QUOTE
        quotes = np.flatnonzero(is_quote)
        colons = np.flatnonzero(piece == _COLON)
        if quotes.size and raw.find(b'\\"', max(start - 1, 0), end) >= 0:
            after = np.flatnonzero(is_quote[1:] & (piece[:-1] == _BACKSLASH)) + 1  # quotes right after a "\\"
            if start and is_quote[0] and a[start - 1] == _BACKSLASH:
                after = np.concatenate(([0], after))
            escaped = after[_odd_runs(a, after + start)]
            quotes = np.delete(quotes, np.searchsorted(quotes, escaped))
        if colons.size:
            before = np.searchsorted(quotes, colons)  # the quotes of this piece before each ":"
            keys += int(np.count_nonzero(((before + inside) & 1) == 0))
        inside ^= quotes.size & 1
    return keys


def _keys_by_colons(raw: bytes) -> int | None:
    """How many keys the JSON text ``raw`` holds, as :func:`_keys_in_text` counts them, read from the
    two bytes before each ``:`` alone; None where that does not tell (then :func:`_keys_in_text`).
    In valid JSON a key's ``:`` comes right after its closing quote or after whitespace, and a ``:``
    inside a string after anything. So a ``:`` after ``\\t``, ``\\n`` or ``\\r`` (never raw in a string)
    is a key's, one after a space may be either (None), and one after a quote is a key's where the
    quote closes a string: not escaped (an odd run of backslashes before it), and not after what
    may come before an opening quote (whitespace, ``{``, ``[``, ``,``, ``:``: else None, as for a
    string that starts with ``:``). Only the ``:`` after a byte up to ``"`` are looked at, found
    with numpy in pairs of bytes read as uint16, even and odd, by pieces: 0.09-0.11 s of CPU for
    the 87 MiB of a 5,000-node NodeList, where :func:`_keys_in_text` takes 0.22-0.27 s."""
    if raw.startswith(b'":'):
        return None  # a top-level string that starts with ":" (nothing comes before its quote)
    a = np.frombuffer(raw, np.uint8)
    keys = 0
    for start in range(0, a.size, _COLONS_PIECE):
        piece = a[start:start + _COLONS_PIECE + 1]  # its ":" at start + 1 .. start + _COLONS_PIECE
        even, odd = piece.size // 2 * 2, (piece.size - 1) // 2 * 2
        for pairs, at in ((piece[:even], start), (piece[1:1 + odd], start + 1)):
            # Where the byte before a ":" (up to '"') is: a pair's low byte.
            pos = np.flatnonzero((pairs.view("<u2") - np.uint16(_COLON_AFTER)) <= _QUOTE) * 2 + at
            if not pos.size:
                continue
            before = a[pos]
            is_quote = before == _QUOTE
            quotes = pos[is_quote]
            if quotes.size != pos.size:
                other = before[~is_quote]
                if np.any(other == _SPACE):
                    return None
                keys += int(np.count_nonzero(_KEY_WHITESPACE[other]))
            if not quotes.size:
                continue
            prior = _BEFORE_QUOTE[a[quotes - 1]]  # a quote at 0 is not among them (see above)
            if np.any(prior == 1):
                return None
            keys += quotes.size - int(np.count_nonzero(_odd_runs(a, quotes[prior == 2])))
    return keys


def _odd_runs(a: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Whether the run of backslashes right before each of ``at`` (sorted positions in ``a``, each
    right after a backslash) is odd: a quote there is escaped. Most runs are 1 long (``\\"``)."""
    odd = np.ones(at.size, bool)
    longer = np.flatnonzero(a[np.maximum(at - 2, 0)] == _BACKSLASH)
    longer = longer[at[longer] >= 2]
    if not longer.size:
        return odd
    p = at[longer]
    lo = int(p[0]) - 1  # a backslash: the first one's last
    bs = a[lo:int(p[-1])] == _BACKSLASH
    starts = np.flatnonzero(bs & ~np.concatenate(([False], bs[:-1]))) + lo  # where each run starts: lo first
    first = starts[np.searchsorted(starts, p, side="right") - 1]
    runs = p - first
    if lo > 0 and a[lo - 1] == _BACKSLASH:  # the first run began before lo
        runs[first == lo] += _backslashes_before(a, lo)
    odd[longer] = (runs & 1) == 1
    return odd


def _backslashes_before(a: np.ndarray, end: int) -> int:
    """How many backslashes come right before ``a[end]``: windows growing fourfold, back from it."""
    run, width = 0, 64
    while end - run > 0:
        window = a[max(end - run - width, 0):end - run]
        other = np.flatnonzero(window != _BACKSLASH)
        if other.size:
            return run + window.size - 1 - int(other[-1])
        run += window.size
        width *= 4
    return run


class _Repeated:
    """What an object with a repeated key parses to in :func:`_repeated_key`: the path below it
    (the key itself, or a key and what is below it)."""

    __slots__ = ("path",)

    def __init__(self, path: tuple[str | int, ...]) -> None:
        self.path = path


class _KeyRepeated(Exception):
    """An object of the body repeats a key (:func:`_unique_pairs`, :func:`_walk`)."""


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """The object hook where :func:`_loads` checks each object's pairs as json parses it."""
    out = dict(pairs)
    if len(out) != len(pairs):
        raise _KeyRepeated
    return out


def _repeated_in(value: Any) -> tuple[str | int, ...] | None:
    if type(value) is _Repeated:
        return value.path
    if type(value) is list:
        for i, item in enumerate(value):
            below = _repeated_in(item)
            if below is not None:
                return (i, *below)
    return None


def _repeated_pairs(pairs: list[tuple[str, Any]]) -> _Repeated | None:
    """The object hook of :func:`_repeated_key`: None for an object with no key repeated, in it
    or below, so that what it parsed is not kept."""
    seen: set[str] = set()
    for key, value in pairs:
        below = _repeated_in(value)
        if below is not None:
            return _Repeated((key, *below))
        if key in seen:
            return _Repeated((key,))
        seen.add(key)
    return None


def _repeated_key(text: str) -> tuple[str | int, ...] | None:
    """The path of the first key repeated in one object of ``text`` (valid JSON), or None. Parsed
    once more with every object's pairs, a Python call each (twice the time of a plain parse):
    only for a body known to hold one (:func:`_keys_by_colons`, :func:`_keys_in_text`). What is
    parsed is dropped object by object, so it takes less than the document did."""
    return _repeated_in(json.loads(text, parse_constant=_NonFinite, object_pairs_hook=_repeated_pairs))


def _building(raw: bytes, start: int, end: int) -> int:
    """What json holds beyond the string it builds from ``raw[start:end]`` (its bytes in the
    body) where it holds an escape, as sent or made by :func:`_ascii_text`: a buffer a quarter
    longer than its characters, and where a wider character comes, a copy in a wider buffer
    besides: 1.25 + 2.5 bytes a character where U+4E2D ends ASCII (the string takes 2), 2.5 + 5
    where U+1F600 follows (4): reckoned at 2 and 4 more, a little over. Measured with
    tracemalloc: 2.25, 4.75 and 8.5 times the body for a 4 MiB string ending with ``\\n``, with
    U+4E2D, and with U+4E2D, 4 MiB of ASCII and U+1F600."""
    if raw.find(b"\\", start, end) < 0 and (_NON_ASCII.search(raw, start, end) is None or not _text_plan(raw)[1]):
        return 0  # taken from the text as it is
    # A character for each escape: 6 bytes where "\\u" does not follow an escaped "\\".
    chars = end - start - 5 * max(raw.count(b"\\u", start, end) - raw.count(b"\\\\u", start, end), 0)
    if _SURROGATE_ESCAPE.search(raw, start, end) or any(raw.find(b, start, end) >= 0 for b in _ASTRAL_LEADS):
        return chars * 4
    if _NON_ASCII.search(raw, start, end) or raw.find(b"\\u", start, end) >= 0:
        return chars * 2  # U+0080..U+FFFF: 1.5 or 1.75
    return chars // 4 + 1


def decode_estimate(raw: bytes, parsed: int = 0) -> int:
    """What :func:`loads_strict` takes for text besides :func:`parse_estimate`'s values (``parsed``
    bytes, when known): the text it parses, and string contents wider than the body. CPython
    stores a str at 1, 2 or 4 bytes a character by its widest one: one emoji in 256 MiB would make
    the decoded text 1 GiB, so a body with such characters is parsed as ASCII with them escaped
    (:func:`_ascii_text`) where that text is the smaller; it is built from pieces as large, gone
    before the first value is parsed. A string holding a wide character is up to 2 or 4 times its
    length all the same (:func:`_wide_strings`: only those strings, not the whole body); an escape
    (``\\ud83d\\ude00``) widens a string alone."""
    n = len(raw)
    width, escaped = _text_plan(raw)
    text = escaped + max(escaped - parsed, 0) if escaped else n * width
    # The text, and what strings wider than 1 byte a character add to contents bounded by the body.
    return text + _wide_strings(raw)


def _wide_strings(raw: bytes) -> int:
    """At most what the strings of ``raw`` that hold a character past U+00FF (sent as UTF-8 or as
    an escape) take once parsed beyond 1 byte a character: each such string's bytes in ``raw``
    (at least its characters) times 1, or 3 where it holds one past U+FFFF. Counting the whole
    body at the widest character's width instead reckoned one emoji in a 5,000-node NodeList at
    twice the parse's real peak (678 MiB for 338), past the 512 MiB limit.

    A string is found around each such character: back to the last ``"`` not after a ``\\`` (the
    opening quote: in valid JSON the byte before an opening quote is never a ``\\``, and every
    quote inside is after one), forward to the first ``"`` not after one (at or past the closing
    quote: one after an escaped ``\\`` only makes the span longer, covering the strings within it).
    Where the JSON is invalid the parse stops there and creates no more than this. Past
    ``_WIDE_STEPS`` quote steps (a body of many wide strings or escaped quotes), the rest of the
    body counts as one string, as all of it did before."""
    n = len(raw)
    ascii_body = raw.isascii()
    piece_at, marks = -1, b""  # _WIDE_LEAD of the piece of raw that starts at piece_at

    def lead(at: int) -> int:
        """The first lead byte of a character past U+00FF at or after ``at`` (n: none), found a
        piece at a time (each piece is copied and translated once)."""
        nonlocal piece_at, marks
        while at < n:
            start = at - at % _ESCAPE_CHUNK
            if start != piece_at:
                piece = raw[start:start + _ESCAPE_CHUNK]
                piece_at, marks = start, b"" if piece.isascii() else piece.translate(_WIDE_LEAD)
            i = marks.find(b"w", at - start) if marks else -1
            if i >= 0:
                return start + i
            at = start + _ESCAPE_CHUNK
        return n

    extra = steps = 0
    done = 0  # raw[:done] is accounted for
    floor = 0  # a quote (or 0) at or before the opening quote of any string past done
    escape = char = -1  # the next wide escape and the next wide character at or after done (n: none)
    if ascii_body:
        char = n
    while True:
        if escape < done:
            m = _UCS2_ESCAPE.search(raw, done)
            escape = m.start() if m else n
        if char < done:
            char = lead(done)
        p = min(escape, char)
        if p >= n:
            return extra
        start = p
        while True:  # back to the opening quote
            start = raw.rfind(b'"', floor, start)
            steps += 1
            if start < 0 or steps > _WIDE_STEPS:
                start = floor
                break
            if start == floor or raw[start - 1] != 0x5C:
                break
        end = p
        while True:  # forward to a quote not after a "\"
            end = raw.find(b'"', end + 1)
            steps += 1
            if end < 0 or raw[end - 1] != 0x5C or steps > _WIDE_STEPS:
                break
        if end < 0 or steps > _WIDE_STEPS:
            end = n  # the rest as one string
        astral = _SURROGATE_ESCAPE.search(raw, start, end) is not None or (
            not ascii_body and any(raw.find(b, start, end) >= 0 for b in _ASTRAL_LEADS))
        extra += (end - start) * (3 if astral else 1)
        if end == n:
            return extra
        done, floor = end + 1, end


def _text_plan(raw: bytes) -> tuple[int, int]:
    """``(width, escaped)``: the bytes a character of ``raw`` decoded is stored at (1, 2 or 4), and
    the length of the ASCII text :func:`_ascii_text` makes of it, or 0 where that is no smaller
    than the decoded text (ASCII, Latin-1, a body mostly of wide characters: ``\\u4e2d`` is 6
    bytes where the character takes 2). Counted by pieces: an ASCII one is one ``isascii``."""
    if raw.isascii():
        return 1, 0
    chars = escaped = len(raw)
    latin = lead2 = lead3 = lead4 = 0
    for start in range(0, len(raw), _ESCAPE_CHUNK):
        piece = raw[start:start + _ESCAPE_CHUNK]
        if piece.isascii():
            continue
        classes = piece.translate(_UTF8_CLASS)
        chars -= classes.count(b"c")
        latin += classes.count(b"l")
        lead2 += classes.count(b"2")
        lead3 += classes.count(b"3")
        lead4 += classes.count(b"4")
    width = 4 if lead4 else 2 if lead2 or lead3 else 1
    escaped += 4 * (latin + lead2) + 3 * lead3 + 8 * lead4  # "\uXXXX" for 2 or 3 bytes, a pair for 4
    return width, escaped if width > 1 and escaped < width * chars else 0


def loads_strict(raw: bytes, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Parse ``raw`` as RFC 8259 JSON in UTF-8, or raise :class:`JsonBodyError` naming the field.

    Refused beyond what ``json.loads`` refuses: other encodings (json.loads also guesses UTF-16
    and UTF-32) and a BOM, ``NaN`` / ``Infinity`` / numbers that overflow to infinity, integers
    outside int64 (every integer in a kube object is one), strings with lone surrogates (Go
    would read them as U+FFFD, so a name would not match), nesting deeper than ``max_depth``, and
    a key repeated in one object (``pod.spec.containers[0].resources.requests.cpu: duplicate
    field``: json and Go keep the last value, other readers the first; Kubernetes' strict field
    validation refuses it; kube-scheduler and the API server never send one).
    A body with characters past U+00FF may be parsed from :func:`_ascii_text`: the same document,
    the same errors.
    """
    return _loads(raw, max_depth, None)[0]


def loads_with_spans(raw: bytes, path: tuple[str, ...], max_depth: int = MAX_JSON_DEPTH) -> tuple[Any, ArraySpans | None]:
    """:func:`loads_strict`, and where the array at ``path`` (object keys from the top: ``("Nodes",
    "items")``) is, the JSON text of each of its items (:class:`ArraySpans`), found by the same
    parse: json's scanner is called once per item, so where it ends is known. The document and the
    errors are those of :func:`loads_strict`. ``None`` where the path leads to no array."""
    return _loads(raw, max_depth, path)


class ArraySpans:
    """Where each item of a parsed array (``items``, the very list in the document) is in the
    text it was parsed from: :meth:`text` of item ``k`` is JSON that parses to ``items[k]``.

    The items' keys are not shared between items, as one ``json.loads`` shares every equal key:
    a NodeList of 5,000 kubelet Nodes peaks 40 MiB higher to parse (334 -> 374 MiB, tracemalloc),
    which :meth:`RoutedJsonHandler.read_json` charges (:func:`parse_estimates`)."""

    __slots__ = ("items", "_source", "_spans")

    def __init__(self, items: list[Any], source: bytes | str, spans: array.array) -> None:
        self.items = items
        self._source = source  # the body where the parsed text is its bytes (ASCII), else the text
        self._spans = spans  # start and end of each item, in turn: 16 B an item

    def text(self, k: int) -> bytes | memoryview:
        """Item ``k`` as JSON in UTF-8: the bytes of the body (no copy) where they are the text."""
        start, end = self._spans[2 * k], self._spans[2 * k + 1]
        if isinstance(self._source, str):
            return self._source[start:end].encode("utf-8")
        return memoryview(self._source)[start:end]


_WHITESPACE = re.compile(r"[ \t\n\r]*")  # json's own


class _NotWalked(Exception):
    """The text is not what :func:`_walk` reads: json.loads parses it (and names what is wrong)."""


def _walk(text: str, path: tuple[str, ...],
          unique: bool = False) -> tuple[Any, list[tuple[list[Any], array.array]]]:
    """``json.loads(text)`` for a top-level object, the objects along ``path`` read here and every
    other value by json's own scanner, so the spans of the items of each array at ``path`` are
    known: ``(document, [(array, spans), ...])`` (a repeated key may give several; the document
    holds the last, and :func:`_loads` refuses it). Raises :class:`_NotWalked` where json.loads raises a JSONDecodeError, or the
    text is not an object; a RecursionError or json's other ValueErrors as json.loads would. With
    ``unique``, :class:`_KeyRepeated` where an object repeats a key."""
    # One decoder per call, as json.loads makes (its memo is its own).
    decoder = json.JSONDecoder(parse_constant=_NonFinite, object_pairs_hook=_unique_pairs if unique else None)
    scan = make_scanner(decoder)
    ws = _WHITESPACE.match
    found: list[tuple[list[Any], array.array]] = []

    def value(end: int, rest: tuple[str, ...]) -> tuple[Any, int]:
        ch = text[end:end + 1]
        if rest and ch == "{":
            return obj(end + 1, rest)
        if not rest and ch == "[":
            return items_of(end + 1)
        return plain(end)

    def obj(end: int, rest: tuple[str, ...]) -> tuple[dict[str, Any], int]:
        out: dict[str, Any] = {}
        end = ws(text, end).end()
        if text[end:end + 1] == "}":
            return out, end + 1
        while True:
            if text[end:end + 1] != '"':
                raise _NotWalked
            key, end = scanstring(text, end + 1, True)
            if unique and key in out:
                raise _KeyRepeated
            end = ws(text, end).end()
            if text[end:end + 1] != ":":
                raise _NotWalked
            end = ws(text, end + 1).end()
            out[key], end = value(end, rest[1:]) if key == rest[0] else plain(end)
            end = ws(text, end).end()
            ch = text[end:end + 1]
            if ch == "}":
                return out, end + 1
            if ch != ",":
                raise _NotWalked
            end = ws(text, end + 1).end()

    def plain(end: int) -> tuple[Any, int]:
        try:
            return scan(text, end)
        except StopIteration:
            raise _NotWalked from None

    def items_of(end: int) -> tuple[list[Any], int]:
        items: list[Any] = []
        spans = array.array("q")
        end = ws(text, end).end()
        if text[end:end + 1] == "]":
            found.append((items, spans))
            return items, end + 1
        while True:
            item, stop = plain(end)
            items.append(item)
            spans.append(end)
            spans.append(stop)
            end = ws(text, stop).end()
            ch = text[end:end + 1]
            if ch == "]":
                found.append((items, spans))
                return items, end + 1
            if ch != ",":
                raise _NotWalked
            end = ws(text, end + 1).end()

    start = ws(text, 0).end()
    if text[start:start + 1] != "{":
        raise _NotWalked
    try:
        doc, end = obj(start + 1, path)
    except json.JSONDecodeError:
        raise _NotWalked from None
    if ws(text, end).end() != len(text):
        raise _NotWalked  # "Extra data"
    return doc, found


def _loads(raw: bytes, max_depth: int, path: tuple[str, ...] | None,
           repeats: bool = True, pairs: bool = True) -> tuple[Any, ArraySpans | None]:
    """:func:`loads_strict` and :func:`loads_with_spans`; ``repeats``: whether a key repeated in
    one object is looked for (it is refused); ``pairs``: whether it may be looked for in each
    object's pairs as json parses it (a small body with few objects), else by counting keys."""
    spans = None
    # A Python call an object (0.6-1 us) costs less than the count's numpy calls (~65 us) up to
    # _PAIRS_CHECKED objects. Where one repeats a key, the body is parsed again with the count, so
    # that what is refused, and in what order, does not depend on the way.
    unique = repeats and pairs and len(raw) <= _COUNTED_BODY and raw.count(b"{") <= _PAIRS_CHECKED
    hook = _unique_pairs if unique else None
    # Counted before the text and the document are made, so that its arrays are not held with them.
    sent_keys = -1
    if repeats and not unique:
        by_colons = _keys_by_colons(raw)
        sent_keys = _keys_in_text(raw) if by_colons is None else by_colons
    if _text_plan(raw)[1]:
        text, spans = _ascii_text(raw)
    else:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _not_utf8(exc, 0) from None
    # A large text is parsed and checked with the cyclic GC paused (see _GcPause).
    paused = len(text) >= _GC_PAUSE_CHARS and _GC_PAUSE.enter()
    try:
        walked = None
        try:
            if path:
                try:
                    doc, arrays = _walk(text, path, unique)
                    walked = next((a for a in reversed(arrays) if _at(doc, path) is a[0]), None)
                    del arrays
                except _NotWalked:
                    doc = json.loads(text, parse_constant=_NonFinite, object_pairs_hook=hook)  # it names what is wrong
            else:
                doc = json.loads(text, parse_constant=_NonFinite, object_pairs_hook=hook)
        except _KeyRepeated:
            doc = walked = None
            return _loads(raw, max_depth, path, repeats, pairs=False)
        except RecursionError:
            raise JsonBodyError(f"JSON nested deeper than {max_depth} levels") from None
        except json.JSONDecodeError as exc:
            where = str(exc) if spans is None else _where_in_raw(exc, raw, spans)
            raise JsonBodyError(f"not valid JSON: {where}") from None
        except ValueError:  # int() refusing more than sys.get_int_max_str_digits() digits
            raise _huge_integer(text) from None
        keys = _check_values(doc, max_depth, surrogates=_SURROGATE_ESCAPE.search(raw) is not None)
        if sent_keys >= 0 and keys != sent_keys:
            # A key sent twice in one object: the document holds one of its values (json keeps the
            # last, as Go's encoding/json does; other readers keep the first), so what was sent is
            # ambiguous, and Kubernetes' strict field validation refuses it. The document goes
            # before the pairs are read again to name the key.
            doc = walked = None
            where = _repeated_key(text)
            if where is None:  # not expected: every key was counted
                return _loads(raw, max_depth, path, repeats=False)
            raise JsonBodyError("duplicate field (sent twice in one object)", _path(where))
        if walked is None:
            return doc, None
        # Offsets in the text are offsets in the body where the body is ASCII (the text is its decode).
        return doc, ArraySpans(walked[0], raw if raw.isascii() else text, walked[1])
    finally:
        if paused:
            _GC_PAUSE.leave()


def _at(doc: Any, path: tuple[str, ...]) -> Any:
    """The value at ``path`` (object keys) in ``doc``, or None."""
    for key in path:
        if type(doc) is not dict:
            return None
        doc = doc.get(key)
    return doc


class _GcPause:
    """The cyclic GC off while large texts are parsed. json makes a container per ``{`` and ``[``
    (none of them in a cycle), and every 700 allocations start a collection whose older
    generations walk the whole half-built document: 0.6 of 0.9 s for a 5,000-node NodeList
    (87 MiB). A request handler keeps it off until its reply is sent (the document is gone by
    then: turned on with it alive, the next allocation would walk it all once more). The switch is
    the process's: it goes off with the first such parse and back on when the last ends. A parse
    that starts after it has been off for ``_GC_PAUSE_MAX_S`` does not join the pause, so that
    parses in a row cannot keep the collector off for good; where something else turned it off,
    it is left alone."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._parses = 0
        self._since = 0.0

    def enter(self) -> bool:
        """Pause for one parse; False where this parse runs with the GC as it is (then no :meth:`leave`)."""
        with self._lock:
            if self._parses == 0:
                if not gc.isenabled():
                    return False
                gc.disable()
                self._since = time.monotonic()
            elif time.monotonic() - self._since > _GC_PAUSE_MAX_S:
                return False
            self._parses += 1
            return True

    def leave(self) -> None:
        with self._lock:
            self._parses -= 1
            if self._parses == 0:
                gc.enable()


_GC_PAUSE = _GcPause()


def _not_utf8(exc: UnicodeDecodeError, offset: int) -> JsonBodyError:
    return JsonBodyError(f"not UTF-8 (byte {offset + exc.start}: {exc.reason})")


# (where a piece starts in the text, the characters of raw before it, its bytes in raw, escaped?)
_Span = tuple[int, int, int, int, bool]


def _ascii_text(raw: bytes) -> tuple[str, list[_Span]]:
    """``raw`` as JSON text in ASCII: each character past U+007F written as a ``\\uXXXX`` escape
    (a surrogate pair past U+FFFF), which json parses to the very same string, while the text is
    1 byte a character. Such characters are only valid inside strings (outside, an escape is as
    much an error), so only two things would read otherwise: a raw control character (escaped
    here it would be valid) and an escaping ``\\`` before a wide character (``\\é``: invalid,
    ``\\\\u00e9``: valid). JSON is invalid at the first of those whatever follows, so the text ends
    there (with the control, or an ``x`` after the ``\\``) and fails at the same place. Invalid
    UTF-8 anywhere is refused first, as ``raw.decode`` names it. Also returns the pieces' spans
    (:func:`_where_in_raw`)."""
    pieces: list[str] = []
    spans: list[_Span] = []
    at = chars = start = 0
    ended = False
    odd = False  # whether the "\\" right before this piece (in those before) are an odd run
    while start < len(raw):
        end = len(raw)
        if start + _ESCAPE_CHUNK < end:
            m = _CHAR_START.search(raw, start + _ESCAPE_CHUNK, start + _ESCAPE_CHUNK + 4)
            end = m.start() if m else min(start + _ESCAPE_CHUNK + 4, end)
        chunk = raw[start:end]
        if chunk.isascii():
            if not ended:
                pieces.append(chunk.decode("ascii"))
                spans.append((at, chars, start, end, False))
                at += len(chunk)
                chars += len(chunk)
        else:
            try:
                decoded = chunk.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise _not_utf8(_whole_body_error(raw, start, end, exc), start) from None
            if not ended:
                piece, hidden = _escape(decoded, odd)
                stop = _invalid_at(chunk, odd) if hidden else None
                if stop is not None:  # the JSON is invalid here: the text ends
                    decoded = chunk[:stop].decode("utf-8")
                    piece = _escape(decoded)[0] + (chr(chunk[stop]) if chunk[stop] < 0x80 else "x")
                    ended = True
                pieces.append(piece)
                spans.append((at, chars, start, start + (len(chunk) if stop is None else stop), True))
                at += len(piece)
                chars += len(decoded)
        run = len(chunk) - len(chunk.rstrip(b"\\"))
        odd = (odd + run) % 2 == 1 if run == len(chunk) else run % 2 == 1
        start = end
    if not ended and raw[-1:] >= b"\x80":
        # JSON never ends with such a character. In a string left open, json reads an escape at
        # the very end as a bad escape: one more character keeps it "Unterminated string".
        pieces.append(" ")
        spans.append((at, chars, len(raw), len(raw), False))
    if raw.startswith(b"\xef\xbb\xbf"):
        return "\ufeff", spans  # json.loads names a BOM (at 0) before reading anything
    return "".join(pieces), spans


def _whole_body_error(raw: bytes, start: int, end: int, exc: UnicodeDecodeError) -> UnicodeDecodeError:
    """The error ``raw.decode`` gives where ``raw[start:end]`` fails with ``exc``: up to 3 more
    bytes finish the character at fault (cut there, it would be "unexpected end of data")."""
    try:
        raw[start:end + 4].decode("utf-8")
    except UnicodeDecodeError as longer:
        return longer
    return exc


def _escape(decoded: str, odd: bool = False) -> tuple[str, bool]:
    """``decoded`` with its characters past U+007F escaped, the rest as it was; and whether JSON
    is invalid in it in a way the escapes hide (see :func:`_invalid_at`; ``odd``: an odd run of
    "\\" right before it). The "\\" sent are marked first, so until the marks go back every
    "\\" of the text starts an escape made here."""
    backslash = "\\" in decoded
    marked = decoded.replace("\\", _BACKSLASH_MARK) if backslash else decoded
    ascii_text = marked.encode("ascii", "backslashreplace")  # \xe9, \u4e2d, \U0001f600; ASCII as it was
    # A "\" sent right before a wide character, once the pairs (each escaping the other) are out.
    hidden = (backslash or odd) and b"\\udbff\\" in (b"\\udbff" * odd + ascii_text).replace(b"\\udbff\\udbff", b"")
    if b"\\U" not in ascii_text:
        ascii_text = ascii_text.replace(b"\\x", b"\\u00")
        if backslash:
            ascii_text = ascii_text.replace(b"\\udbff", b"\\")
        return ascii_text.decode("ascii"), hidden
    # Past U+FFFF json reads a surrogate pair, which encode_basestring_ascii writes; it escapes
    # "\"", \n, DEL and controls too: those go back as they were sent.
    text = encode_basestring_ascii(marked)[1:-1]
    # Before the marks go back, a "\b" or "\u0001" can only be the escape of a control.
    hidden = hidden or "\\u000" in text or "\\u001" in text or "\\b" in text or "\\f" in text
    for char, escape in _UNESCAPE:
        if char in decoded:
            text = text.replace(escape, char)
    return text, hidden


def _invalid_at(chunk: bytes, odd: bool) -> int | None:
    """Where in ``chunk`` JSON is invalid in a way :func:`_escape` may hide: the first raw control
    character (escaped past U+FFFF) or the first character past U+007F escaped by a ``\\`` (an
    odd run of them before it, ``odd`` one more before ``chunk``); None where neither is."""
    found = []
    m = _CONTROL.search(chunk)
    if m:
        found.append(m.start())
    text = b"\\" * odd + chunk
    for m in _BACKSLASH_WIDE.finditer(text):
        run = m.start()
        while run > 0 and text[run - 1] == 0x5C:
            run -= 1
        if (m.start() + 1 - run) % 2:
            found.append(m.start() + 1 - odd)
            break
    return min(found) if found else None


def _where_in_raw(exc: json.JSONDecodeError, raw: bytes, spans: list[_Span]) -> str:
    """``exc`` (from the text of :func:`_ascii_text`) as ``json.loads`` of the decoded ``raw`` would
    put it: line, column and character counted in the characters sent, not in their escapes."""
    def char(pos: int) -> int:
        at, before, start, end, escaped = max((s for s in spans if s[0] <= pos), default=(0, 0, 0, 0, False))
        if not escaped:
            return before + pos - at
        for ch in raw[start:end].decode("utf-8"):
            at += 12 if ch > "\uffff" else 6 if ch > "\x7f" else 1
            if pos < at:
                break
            before += 1
        return before

    newline = exc.doc.rfind("\n", 0, exc.pos)
    column = char(exc.pos) - char(newline) if newline >= 0 else char(exc.pos) + 1
    return f"{exc.msg}: line {exc.lineno} column {column} (char {char(exc.pos)})"


def _check_values(doc: Any, max_depth: int, surrogates: bool) -> int:
    """Check the parsed document level by level (iterative: the depth is not yet known to be
    sane), with no paths kept: a 5000-node NodeList is 300k containers; returns how many keys its
    objects hold. When something is wrong, :func:`_find` walks again, keeping paths, to name the
    field."""
    level = [doc]
    depth = keys = 0
    while level:
        below = []
        for c in level:
            t = type(c)
            if t is dict:
                keys += len(c)
                if surrogates and any(_SURROGATE.search(k) for k in c):
                    return _find(doc, max_depth, surrogates)
                values: Any = c.values()
            elif t is list:
                values = c
            else:
                values = (c,)
            for v in values:
                t = type(v)
                if t is dict or t is list:
                    below.append(v)
                elif t is str:
                    if surrogates and _SURROGATE.search(v):
                        return _find(doc, max_depth, surrogates)
                elif t is int:
                    if not _INT64[0] <= v <= _INT64[1]:
                        return _find(doc, max_depth, surrogates)
                elif t is float:
                    if not math.isfinite(v):
                        return _find(doc, max_depth, surrogates)
                elif t is _NonFinite:
                    return _find(doc, max_depth, surrogates)
        depth += bool(below)
        if depth >= max_depth:
            return _find(doc, max_depth, surrogates)
        level = below
    return keys


def _find(doc: Any, max_depth: int, surrogates: bool) -> int:
    """Raise :class:`JsonBodyError` for the first thing wrong, with its path (-1 where nothing is:
    no key count, see :func:`_loads`)."""
    if type(doc) not in (dict, list):
        _check_scalar(doc, (), surrogates)
        return -1
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(doc, ())]
    while stack:
        value, path = stack.pop()
        if len(path) >= max_depth:
            raise JsonBodyError(f"JSON nested deeper than {max_depth} levels", _path(path))
        if type(value) is dict:
            items: Any = value.items()
            if surrogates:
                for k in value:
                    if _SURROGATE.search(k):
                        raise JsonBodyError(f"key '{k.encode('utf-8', 'backslashreplace').decode()}': lone UTF-16 "
                                            "surrogate (not valid Unicode)", _path(path))
        else:
            items = enumerate(value)
        for k, v in items:
            if type(v) is dict or type(v) is list:
                stack.append((v, (*path, k)))
            else:
                _check_scalar(v, (*path, k), surrogates)
    return -1


def _check_scalar(value: Any, path: tuple[str | int, ...], surrogates: bool) -> None:
    t = type(value)
    if t is str:
        if surrogates and _SURROGATE.search(value):
            raise JsonBodyError("string with a lone UTF-16 surrogate (not valid Unicode)", _path(path))
    elif t is int:
        if not _INT64[0] <= value <= _INT64[1]:
            raise JsonBodyError("integer outside the 64-bit range", _path(path))
    elif t is float:
        if not math.isfinite(value):
            raise JsonBodyError("number too large (overflows to infinity)", _path(path))
    elif t is _NonFinite:
        raise JsonBodyError(f"{value.text} is not a JSON number", _path(path))
    elif t is _HugeInteger:
        raise JsonBodyError("integer outside the 64-bit range", _path(path))


def _malformed_header_line(headers: Any) -> str | None:
    """The first header line that is not ``Name: value`` (``Name : value``, no colon, a first line
    that starts with a space), or None. The stdlib's parser ends the headers at such a line and
    keeps the lines after it (a ``Content-Length``, a ``Transfer-Encoding``) as a "payload" no one
    reads: the request was then served without them, and its body read as the next request on
    the connection (a desync that a proxy in front would not share). Go's net/http refuses it."""
    defects = getattr(headers, "defects", None)
    if not defects:
        return None
    line = getattr(defects[0], "line", None)
    if line is None:  # MissingHeaderBodySeparatorDefect: the bad line is the first of the payload
        payload = headers.get_payload()
        line = payload.splitlines()[0] if isinstance(payload, str) and payload else str(defects[0])
    return line.rstrip("\r\n")


class JsonHandler(BaseHTTPRequestHandler):
    """Keep-alive HTTP/1.1 with JSON replies; access lines go to the debug log."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out without a 40 ms delayed-ACK stall

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        log.debug("%s - " + format, self.address_string(), *args)

    def _send(self, code: int, body: Any, headers: Mapping[str, str] | None = None) -> None:
        # No cycle check: a reply is made of parsed JSON and fresh dicts, and the check keeps a
        # dict of every container's id (about 0.1 s of 0.7 s for an 87 MiB reply); same bytes.
        self.send_body(code, json.dumps(body, check_circular=False).encode(), "application/json", headers)

    def send_body(self, code: int, data: bytes, content_type: str = "application/json",
                  headers: Mapping[str, str] | None = None) -> None:
        """One reply with ``data`` as its body (none for HEAD) and ``Connection: close`` when closing."""
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if self.close_connection:  # say so: the client then opens a new connection instead of seeing EOF
            self.send_header("Connection", "close")
        if self.command == "HEAD":  # a HEAD reply has no body: writing one would be read as the next response
            self.end_headers()
        elif len(data) <= _ONE_WRITE_BYTES and hasattr(self, "_headers_buffer"):
            # With the headers in one write (BaseHTTPRequestHandler's buffer of them, which every
            # reply here has: HTTP/0.9 is refused before): one send and one wake-up of the client.
            self._headers_buffer.append(b"\r\n")
            self._headers_buffer.append(data)
            self.flush_headers()
        else:
            self.end_headers()
            self.wfile.write(data)


class RoutedJsonHandler(JsonHandler):
    """A JSON API handler: :meth:`routes` maps path -> {method: handler}; every error a JSON reply.

    Handlers raise :class:`HttpError` for an error reply and read the body with
    :meth:`read_json`. After an error the unread rest of a body is read (up to ``drain_bytes``)
    or the connection closed, so the next request on a keep-alive connection starts where it
    should. A server sets its limits as attributes of the same names (``max_body_bytes``,
    ``body_timeout_s``, ``header_timeout_s``, ``setting_names``; ``idle_timeout_s`` for
    ``timeout``); the servers differ in their routes, the error key and the hooks below.
    """

    error_key = "Error"  # the message's key in an error reply
    max_body_bytes = 64 * 1024 * 1024
    body_timeout_s = 30.0  # the whole body must arrive within this; else 408 and close
    #: The request line and headers must arrive within this of the request's first byte; else 408
    #: and close (a per-read timeout alone restarts with every byte).
    header_timeout_s = 30.0
    timeout: float | None = 120  # idle keep-alive (kube closes idle ones at 90 s), and each write
    #: How much of a body the handler did not read is read after an error so that the connection
    #: carries on; a longer one closes it (0: any unread body closes the connection).
    drain_bytes = _DRAIN_LIMIT
    #: The header lines of a request, in all (Go's net/http: 1 MB; a kube client sends a few KiB).
    #: The stdlib alone caps each line (64 KiB) and their number (100): 6.5 MB a request, held
    #: several times over while parsed, on each of the open connections.
    max_header_bytes = 64 * 1024
    #: How long a request waits, in all, for room in the server's ``body_budget`` and
    #: ``parse_budget`` before a 503 (None: until its body deadline).
    budget_wait_s: float | None = None
    _budget_waited = 0.0  # per request (see handle_one_request and _acquire)
    #: A body whose parse (:func:`parse_estimate` + :func:`decode_estimate`) would take more than this is refused with a 413
    #: before it is parsed: the body limit alone let 256 MiB of ``[{},...]`` become ~6 GB of objects.
    max_parse_memory = MAX_PARSE_MEMORY
    #: What the bodies being parsed and answered at once may be reckoned to take in all (the
    #: server's ``parse_budget``); past it a body waits as for ``body_budget``, then 503. None:
    #: ``max_parse_memory``, so the largest body parses alone and smaller ones side by side (each
    #: alone under ``max_parse_memory``, 20 extender bodies of 12 MiB parsed ~10 GB at once).
    max_parse_total: int | None = None
    #: The settings behind the limits, named in their errors: {"max_body_bytes": "listen.max_body_bytes"}.
    setting_names: Mapping[str, str] = {}

    def setup(self) -> None:
        for name in ("max_body_bytes", "body_timeout_s", "header_timeout_s", "max_header_bytes", "budget_wait_s",
                     "max_parse_memory", "max_parse_total", "setting_names"):  # the server's own
            setattr(self, name, getattr(self.server, name, getattr(self, name)))
        self.timeout = getattr(self.server, "idle_timeout_s", self.timeout)
        super().setup()
        self.rfile.close()  # the plain reader: replaced by one with a deadline per request
        self._stop: StopSignal | None = getattr(self.server, "stop_signal", None)
        self._reader = DeadlineReader(self.connection, self.header_timeout_s, self.timeout, self._stop)
        self.rfile = io.BufferedReader(self._reader)

    def handle_one_request(self) -> None:
        """The stdlib's loop step, with one deadline for the request line and headers: a request
        that has started but not arrived by then gets 408 and the connection closes; an idle
        keep-alive connection (no byte of a next request) closes quietly after ``timeout``."""
        self._reader.deadline = None  # until the next request's first byte: the idle timeout
        self.raw_requestline = b""
        self.command, self.request_version, self.requestline, self.path = "", self.protocol_version, "", ""
        self.request_started: float | None = None  # perf_counter() when the request line came
        self._body_state = "read"  # nothing of a body pending (see _settle_body)
        self._responded = False
        self._continue_withheld = False
        self._budget_held = 0  # bytes of the server's body_budget this request holds (see _read_exact)
        self._parse_held = 0  # bytes of the server's parse_budget this request holds (see read_json)
        self._gc_paused = False  # this request holds a _GC_PAUSE (see read_json)
        self._budget_waited = 0.0  # seconds this request has waited for budget room (see _acquire)
        self._headers_over = False  # the headers passed max_header_bytes (see parse_request)
        self._headers_cut = False  # the connection ended before the end of the headers (see parse_request)
        self.json_spans: ArraySpans | None = None  # see read_json
        try:
            self.raw_requestline = self.rfile.readline(65537)
            if not self.raw_requestline:
                self.close_connection = True
                return
            self.request_started = time.perf_counter()
            if len(self.raw_requestline) > 65536:
                self.send_error(414, "request line: over 65536 bytes")
                return
            if not self.raw_requestline.endswith(b"\n"):  # the client ended its side: nothing more comes
                self.send_error(400, "request line: the connection was closed before the end of the request line")
                return
            if not self.parse_request():
                return  # an error reply has been sent
        except TimeoutError:
            self.close_connection = True
            if self._reader.deadline is not None:  # a request started and did not arrive in time
                self._request_timed_out()
            return
        try:
            self._dispatch()  # every method: one the path does not serve is a 405 with Allow
            self.wfile.flush()
        except TimeoutError:  # a write timed out: the client does not read its reply
            self.close_connection = True

    def _hint(self, limit: str) -> str:
        """`` (the setting)`` behind ``limit`` where the server names one, for an error message."""
        name = self.setting_names.get(limit)
        return f" ({name})" if name else ""

    def _request_timed_out(self) -> None:
        whole_line = self.raw_requestline.endswith(b"\n")
        field = "headers" if whole_line else "request line"
        self._body_state = "unknown"
        try:
            self.send_json_error(408, f"{field}: did not arrive within {self.header_timeout_s:g} s"
                                 f"{self._hint('header_timeout_s')}", field)
            self.wfile.flush()
        except OSError:
            pass

    def routes(self) -> Mapping[str, Mapping[str, Callable[[], None]]]:
        raise NotImplementedError

    def not_found(self, path: str) -> str:
        return f"unknown path {path!r}"

    def on_error(self, code: int) -> None:
        """Called for every error reply (the servers count them)."""

    def route_path(self) -> str:
        """The path :meth:`routes` is looked up with: the request's, without the query."""
        return urlsplit(self.path).path

    def keep_alive_after_error(self, code: int) -> bool:
        """Whether the connection may carry another request after error ``code`` (when its body
        is settled, see ``drain_bytes``); False closes it."""
        return True

    def request_failed(self, exc: Exception) -> None:
        """A handler raised ``exc`` (not an :class:`HttpError`): log it; a 500 follows."""
        log.exception("%s %s failed", self.command, self.route_path())

    # --- dispatch --------------------------------------------------------------------------

    def _dispatch(self) -> None:
        # Without "100 Continue" the client may never send the body: it is not waited for.
        self._body_state = "withheld" if self._continue_withheld else "unread"
        try:
            self._dispatch_routed()
        finally:
            if self._budget_held:
                self.server.body_budget.release(self._budget_held)  # type: ignore[attr-defined]
                self._budget_held = 0
            if self._parse_held:
                self.server.parse_budget.release(self._parse_held)  # type: ignore[attr-defined]
                self._parse_held = 0
            self.json_spans = None  # it holds the document: gone with the reply, before the GC is back
            self._resume_gc()

    def _dispatch_routed(self) -> None:
        path = self.route_path()
        try:
            self._declared_length()  # framing first, whatever the path and method: a bad one is refused and closes
            methods = self.routes().get(path)
            if methods is None:
                raise HttpError(404, self.not_found(path), "path")
            handler = methods.get(self.command)
            if handler is None:
                self._allow = ", ".join(methods)
                raise HttpError(405, f"method {self.command} is not served on {path} (use {self._allow})", "method")
            if self.command not in _BODY_METHODS and not self._settle_body():
                self.close_connection = True  # a GET with a body: it is not read, and it must not become the next request
            handler()
            if self._body_state == "unread" and not self._settle_body():
                self.close_connection = True
        except HttpError as exc:
            self.send_json_error(exc.code, str(exc), exc.field, exc.retry_after_s)
        except (ConnectionError, TimeoutError):
            raise  # the client is gone or does not read: no reply reaches it (the server logs it)
        except Exception as exc:  # the handler's own fault: a reply, not a dropped connection
            if self._responded:
                raise  # a reply has begun: another would corrupt it
            self.request_failed(exc)
            self.send_json_error(500, f"internal error: {type(exc).__name__}: {exc}")

    def send_body(self, code: int, data: bytes, content_type: str = "application/json",
                  headers: Mapping[str, str] | None = None) -> None:
        self._responded = True
        if self._stop is not None and self._stop.is_set:  # the server is stopping: this reply is the last
            self.close_connection = True
        super().send_body(code, data, content_type, headers)

    def send_json_error(self, code: int, message: str, field: str | None = None,
                        retry_after_s: float | None = None) -> None:
        """Reply ``{error_key: message, "field": field}``; first settle the unread body."""
        self.on_error(code)
        headers: dict[str, str] = {}
        if code == 405:
            headers["Allow"] = getattr(self, "_allow", "")
        elif code == 503:
            headers["Retry-After"] = str(max(1, math.ceil(retry_after_s or 1)))
        if not self.keep_alive_after_error(code) or not self._settle_body():
            self.close_connection = True
        self._send(code, {self.error_key: message, "field": field}, headers)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The stdlib's errors (bad request line, headers too long or too many) as JSON naming
        the part at fault, closing."""
        self.close_connection = True
        self._body_state = "unknown"
        if self.request_version == "HTTP/0.9":  # the request line did not parse: answer in HTTP/1.1, with headers
            self.request_version = self.protocol_version
        text = message or self.responses.get(code, ("error",))[0]
        field = None
        if self._headers_over:
            field, text = "headers", f"headers: over {self.max_header_bytes} bytes in all{self._hint('max_header_bytes')}"
        elif text.startswith(("request line:", "headers:")):
            field = text.split(":", 1)[0]
        elif code == 431:  # the stdlib's "Line too long", "Too many headers"
            field, text = "headers", f"headers: {text}"
        elif code in (400, 505):  # the stdlib's request line checks
            field, text = "request line", f"request line: {text}"
        try:
            self.send_json_error(code, text, field)
        except OSError:
            pass

    def parse_request(self) -> bool:
        rfile = self.rfile
        self.rfile = _HeaderLimit(rfile, self.max_header_bytes, self)  # type: ignore[assignment]
        try:
            parsed = super().parse_request()
        finally:
            self.rfile = rfile
        if not parsed:
            return False
        if self._headers_cut:
            # The stdlib reads the end of the stream as the end of the headers: a request cut short
            # (its Content-Length perhaps not sent yet) was served as if complete. As Go's net/http: 400.
            self.send_error(400, "headers: the connection was closed before the end of the headers")
            return False
        if self.request_version == "HTTP/0.9":  # "GET /path" alone: a reply without status or headers
            self.send_error(400, "request line: HTTP/0.9 is not served (send HTTP/1.1)")
            return False
        if not _METHOD.fullmatch(self.command):
            self.send_error(400, f"request line: not a method: {self.command[:20]!r}")
            return False
        bad = _malformed_header_line(self.headers)
        if bad is not None:
            self.send_error(400, f"headers: malformed header line (expected 'Name: value'): {bad[:60]!r}")
            self._body_state = "refused"  # a body may follow: linger so that the client reads the 400
            return False
        return True

    # --- the body ----------------------------------------------------------------------------

    def _declared_length(self) -> int | None:
        """The body's length from its framing headers; None when there is no body."""
        te = self.headers.get_all("Transfer-Encoding") or []
        cl = self.headers.get_all("Content-Length") or []
        if te:
            if cl:  # which one ends the body depends on who reads it: the request smuggling setup
                raise HttpError(400, "Transfer-Encoding: not accepted together with Content-Length", "Transfer-Encoding")
            raise HttpError(411, f"Transfer-Encoding: {', '.join(te)[:40]!r} is not accepted: send the body with "
                            "Content-Length", "Transfer-Encoding")
        if not cl:
            return None
        values = {v.strip() for v in cl}
        if len(values) > 1:
            raise HttpError(400, f"Content-Length: conflicting values {sorted(values)}"[:120], "Content-Length")
        text = values.pop()
        if not _DIGITS.fullmatch(text):
            if text.isascii() and text.isdigit():
                raise HttpError(413, f"Content-Length: {text[:30]}... bytes is over the limit of {self.max_body_bytes}"
                                f"{self._hint('max_body_bytes')}", "Content-Length")
            raise HttpError(400, f"Content-Length: expected a non-negative decimal integer, got {text[:40]!r}",
                            "Content-Length")
        return int(text)

    def _settle_body(self) -> bool:
        """Before an error reply: True when the connection can carry another request (the body,
        if any, has been read, or is read now when at most ``drain_bytes``)."""
        if self._body_state == "read":
            return True
        if self._body_state != "unread":
            return False
        try:
            length = self._declared_length()
            if length is None:
                self._body_state = "read"
                return True
            if length > self.drain_bytes:
                return False
            self._read_exact(length, keep=False)
            return True
        except (HttpError, OSError):
            return False

    def _read_exact(self, length: int, keep: bool = True) -> bytes:
        """``length`` bytes within ``body_timeout_s`` in all (a per-read timeout alone lets a client
        that sends one byte at a time hold the thread for ever). A body that is kept is charged to
        the server's ``body_budget`` as it is read, and held until the reply is sent (see
        :meth:`_dispatch`): the bodies in memory at once are bounded by the budget, not by the
        number of connections. One that is not kept (a drain) is dropped chunk by chunk."""
        self._body_state = "failed"  # until it is all here
        deadline = self._reader.deadline = time.monotonic() + self.body_timeout_s
        budget: ByteBudget | None = getattr(self.server, "body_budget", None) if keep else None
        chunks: list[bytes] = []
        got = 0
        reserved = 0  # bytes of the budget taken for the current chunk and not read yet
        try:
            while got < length:
                want = min(length - got, _READ_CHUNK)
                if budget is not None:
                    if not reserved:
                        if not self._acquire(budget, want, deadline, self._budget_held):
                            raise HttpError(503, f"body: the server holds {budget.limit} bytes of request bodies at "
                                            f"once and had no room for this one's {length} in time: retry", "body")
                        self._budget_held += want
                        reserved = want
                    want = reserved
                chunk = self.rfile.read1(want)
                reserved -= min(reserved, len(chunk))
                if not chunk:
                    raise HttpError(400, f"body: ended after {got} of {length} bytes", "body")
                if keep:
                    chunks.append(chunk)
                got += len(chunk)
        except TimeoutError:
            raise HttpError(408, f"body: {got} of {length} bytes arrived within {self.body_timeout_s:g} s"
                            f"{self._hint('body_timeout_s')}", "body") from None
        self._body_state = "read"
        return b"".join(chunks)

    def read_body(self) -> bytes:
        """The request body, framed by one Content-Length of at most ``max_body_bytes``."""
        length = self._declared_length()
        if length is None:
            raise HttpError(411, "Content-Length: required (send a JSON body with Content-Length)", "Content-Length")
        if length > self.max_body_bytes:
            self._body_state = "refused"  # not read, not drained: the connection closes
            raise HttpError(413, f"Content-Length: {length} bytes is over the limit of {self.max_body_bytes}"
                            f"{self._hint('max_body_bytes')}", "Content-Length")
        return self._read_exact(length)

    def read_json(self, spans_at: tuple[str, ...] | None = None) -> Any:
        """The body parsed by :func:`loads_strict`; errors are 400s naming the field, a 413 for
        a body that would take more than ``max_parse_memory`` once decoded and parsed, and a 503
        when the server's ``parse_budget`` has no room for it in time. With ``spans_at``, parsed
        by :func:`loads_with_spans` instead: the items' JSON text is then ``self.json_spans``."""
        # The body's bytes stay charged to the server's body_budget (if any) until the reply; a
        # parsed body takes up to ~30 times its size ("[{},{},...]"), which the parse_budget counts.
        raw = self.read_body()
        values, need, copied, decoded = _charge(raw, spans_at is not None, self.max_parse_memory)
        need += decoded
        if need > self.max_parse_memory:
            raise HttpError(413, f"body: {len(raw)} bytes holding up to {values} JSON values would take about "
                            f"{need >> 20} MiB once decoded and parsed, over the limit of {self.max_parse_memory} "
                            f"bytes{self._hint('max_parse_memory')}", "body")
        if spans_at is not None:
            if need + copied <= self.max_parse_memory:
                need += copied
            else:  # parsed as any body, within the limit: only the spans are given up
                spans_at = None
        # Each body under max_parse_memory is not enough: the parses of all requests at once are
        # charged to the server's parse_budget too, held (like the body) until the reply is sent.
        budget = self._parse_budget()
        if not self._acquire(budget, need, self._reader.deadline or 0.0, self._parse_held):
            raise HttpError(503, f"body: the server parses at most about {budget.limit} bytes of request bodies "
                            f"at once and had no room for this one's {need} in time: retry", "body")
        self._parse_held += need
        if len(raw) >= _GC_PAUSE_CHARS and not self._gc_paused:
            # The cyclic GC stays off until the reply is sent (see _dispatch), not only for the
            # parse: turned on with the document alive, the next allocation would walk it all.
            # None of a request's own objects are cycles (1,000 requests, good and bad, left none).
            self._gc_paused = _GC_PAUSE.enter()
        try:
            if spans_at is None:
                return loads_strict(raw)
            doc, self.json_spans = loads_with_spans(raw, spans_at)
            return doc
        except JsonBodyError as exc:
            raise HttpError(400, str(exc), exc.field) from None

    def _resume_gc(self) -> None:
        if self._gc_paused:
            self._gc_paused = False
            _GC_PAUSE.leave()

    def _acquire(self, budget: ByteBudget, need: int, deadline: float, held: int) -> bool:
        """Take ``need`` bytes of ``budget``, waiting for room until the body's ``deadline``
        (monotonic) and, in all this request's waits, at most ``budget_wait_s``: a body waits once
        per 256 KiB read and again for its parse, and per-wait bounds added up past the caller's
        own timeout (an 8 MiB body could wait 32 times)."""
        wait = deadline - time.monotonic()
        if self.budget_wait_s is not None:
            wait = min(wait, self.budget_wait_s - self._budget_waited)
        start = time.monotonic()
        try:
            return budget.acquire(need, max(wait, 0.0), held)
        finally:
            self._budget_waited += time.monotonic() - start

    def _parse_budget(self) -> ByteBudget:
        """The server's ``parse_budget``, made on first use where the server has none
        (``max_parse_total`` bytes, else ``max_parse_memory``). A server should make its own in
        ``__init__`` (the extender and the webhook do): this is the fallback."""
        budget: ByteBudget | None = getattr(self.server, "parse_budget", None)
        if budget is None:
            with _PARSE_BUDGET_LOCK:
                budget = getattr(self.server, "parse_budget", None)
                if budget is None:
                    budget = ByteBudget(self.max_parse_total or self.max_parse_memory)
                    self.server.parse_budget = budget  # type: ignore[attr-defined]
        return budget

    def handle_expect_100(self) -> bool:
        """``100 Continue`` only for a body that will be read: one that will be refused (too
        large, ambiguous framing, a path or method that reads none) gets its final answer at once,
        and the client need not send it."""
        try:
            length = self._declared_length()
        except HttpError:
            length = None
        if _malformed_header_line(self.headers) is not None or self._headers_cut:
            length = None  # refused with a 400 once the headers are in (parse_request): no go-ahead
        methods = self.routes().get(self.route_path()) or {}
        if (length is None or length > self.max_body_bytes or self.command not in _BODY_METHODS
                or self.command not in methods):
            self._continue_withheld = True
            return True
        return super().handle_expect_100()

    def finish(self) -> None:
        super().finish()
        if getattr(self, "_body_state", "read") in ("unread", "withheld", "refused", "failed"):
            self._linger()

    def _linger(self) -> None:
        """The connection closes with a body (partly) unread (413, 411, a framing error...).
        Closing now, with the client still sending, would make the kernel reset the connection,
        and a client that is still writing would never read its reply. So: end our side (FIN),
        then read and drop what comes, for at most _LINGER_S seconds and _LINGER_BYTES bytes."""
        conn = self.connection
        try:
            conn.shutdown(socket.SHUT_WR)
            end = time.monotonic() + min(_LINGER_S, self.body_timeout_s)
            left = _LINGER_BYTES
            while left > 0 and (wait := end - time.monotonic()) > 0:
                conn.settimeout(wait)
                chunk = conn.recv(min(left, 1 << 16))
                if not chunk:
                    break
                left -= len(chunk)
        except OSError:
            pass


class _HeaderLimit:
    """The handler's reader while the headers are parsed: ``readline`` past ``limit`` bytes in all
    raises the error the stdlib answers with a 431 (the handler names the limit)."""

    def __init__(self, rfile: Any, limit: int, handler: RoutedJsonHandler) -> None:
        self._rfile = rfile
        self._left = limit
        self._handler = handler

    def readline(self, size: int = -1) -> bytes:
        line = self._rfile.readline(size)
        if not line.endswith(b"\n") and (size < 0 or len(line) < size):  # the stream ended: no blank line came
            self._handler._headers_cut = True
        self._left -= len(line)
        if self._left < 0 and len(line) <= 65536:  # a longer line: the stdlib's own "Line too long"
            self._handler._headers_over = True
            raise http.client.HTTPException("headers over the limit")
        return line

    def __getattr__(self, name: str) -> Any:
        return getattr(self._rfile, name)


class ByteBudget:
    """How many bytes of request bodies a server reads, parses and answers at once. A server sets
    one as its ``body_budget``: a handler holds each part of a body from just before it is read
    until its reply is sent, waiting (at most until its body deadline) while others hold too
    much; a body larger than the whole budget is let through alone. Bodies that together pass
    the budget while partly read wait for each other until that deadline (then 503)."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"body budget: must be >= 1 byte, got {limit}")
        self.limit = limit
        self.held = 0
        self._cond = threading.Condition()

    def acquire(self, n: int, timeout: float, mine: int = 0) -> bool:
        """Hold ``n`` more bytes besides the ``mine`` the caller holds already; False when they
        were not free within ``timeout`` seconds. Alone (no one else holds any), the caller
        always gets them: its own share must not make it wait for itself."""
        end = time.monotonic() + timeout
        with self._cond:
            while self.held > mine and self.held + n > self.limit:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            self.held += n
            return True

    def release(self, n: int) -> None:
        with self._cond:
            self.held -= n
            self._cond.notify_all()


class StopSignal:
    """Set once, when a server stops taking requests (:meth:`ConnectionLimit.close_idle_reads`):
    it wakes the threads that wait for a connection's next request (:class:`DeadlineReader`), which
    poll a pipe along with their socket. A request that has started is not touched."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        self._lock = threading.Lock()
        self.is_set = False
        # close() closes the pipe only once no wait polls it (the last wait closes it otherwise): a
        # closed fd's number is reused by the next open, and a wait polling that reuse would take it
        # for the signal (or get POLLNVAL).
        self._closing = False
        self._waiters = 0

    def set(self) -> None:
        with self._lock:
            if not self.is_set:
                self.is_set = True
                os.write(self._write, b"x")  # never read: the pipe stays readable

    def close(self) -> None:
        """Set, and close the pipe, now or when the last wait polling it returns (at once: the pipe
        is readable); a wait that starts after this one polls no pipe."""
        self.set()
        with self._lock:
            self._closing = True
            if self._waiters == 0:
                self._close_pipe()

    def _close_pipe(self) -> None:  # with the lock held
        if self._write >= 0:
            os.close(self._read)
            os.close(self._write)
            self._read = self._write = -1

    def wait_readable(self, sock: socket.socket, timeout: float | None) -> bool:
        """Whether ``sock`` has something to read (bytes, or its end) within ``timeout`` seconds:
        False once the signal is set (or closed) with nothing there; TimeoutError after ``timeout``."""
        pending = getattr(sock, "pending", None)  # TLS: bytes already decrypted, which poll does not see
        if pending is not None and pending():
            return True
        with self._lock:  # the fd is read, and kept open, under the lock that close() takes
            if self.is_set or self._closing:
                pipe = -1
            else:
                pipe = self._read
                self._waiters += 1
        if pipe < 0:
            return _readable_now(sock)
        try:
            poller = select.poll()
            poller.register(sock, select.POLLIN)
            poller.register(pipe, select.POLLIN)
            ready = dict(poller.poll(-1 if timeout is None else math.ceil(max(timeout, 0.0) * 1000)))
        finally:
            with self._lock:
                self._waiters -= 1
                if self._closing and self._waiters == 0:
                    self._close_pipe()
        if sock.fileno() in ready:
            return True
        if ready:  # the signal
            return _readable_now(sock)
        raise TimeoutError("idle connection timed out")


def _readable_now(sock: socket.socket) -> bool:
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


class DeadlineReader(socket.SocketIO):
    """The read side of a connection with a deadline per request: once a request's first byte is
    here, reads must complete within ``timeout_s`` of it (a plain socket timeout restarts with
    every byte, so a client that trickles one byte at a time would hold the thread for ever).
    With no request started, a read waits ``idle_s`` (default ``timeout_s``), and ends the stream
    at once when ``stop`` is set (the server stops: see :class:`StopSignal`). The handler sets
    ``deadline`` to None between requests, and may set it anew (for a body)."""

    def __init__(self, sock: socket.socket, timeout_s: float, idle_s: float | None = None,
                 stop: StopSignal | None = None) -> None:
        super().__init__(sock, "rb")
        self.timeout_s = timeout_s
        self.idle_s = timeout_s if idle_s is None else idle_s
        self.stop = stop
        self.deadline: float | None = None

    def readinto(self, b: Any) -> int | None:
        if self.deadline is None:
            wait = self.idle_s
            if self.stop is not None and not self.stop.wait_readable(self._sock, wait):  # type: ignore[attr-defined]
                return 0  # no request started: the connection ends
        else:
            wait = self.deadline - time.monotonic()
            if wait <= 0:
                raise TimeoutError("request deadline passed")
        sock = self._sock  # type: ignore[attr-defined]
        sock.settimeout(wait)
        try:
            n = super().readinto(b)
        finally:
            sock.settimeout(self.idle_s)  # writes keep the plain timeout
        if n and self.deadline is None:
            self.deadline = time.monotonic() + self.timeout_s
        return n


class RequestStats:
    """Mixin: ``stats``, counters ({name: count}) that every request's thread adds to. ``stats[k]
    += 1`` is a read, an add and a write, which Python does not promise to run as one step (a
    thread switch between them loses a count): add with :meth:`count`, read with :meth:`stats_snapshot`."""

    def __init__(self, *keys: str) -> None:
        self.stats: dict[str, int] = dict.fromkeys(keys, 0)
        self._stats_lock = threading.Lock()

    def count(self, key: str) -> None:
        """Add 1 to ``stats[key]`` (safe from any thread)."""
        with self._stats_lock:
            self.stats[key] += 1

    def stats_snapshot(self) -> dict[str, int]:
        """A consistent copy of ``stats``."""
        with self._stats_lock:
            return dict(self.stats)

    def count_error(self, code: int) -> None:
        """Count an error reply (a handler's ``on_error``; needs the keys ``errors`` and
        ``bad_requests``): a 5xx (body budget full, the handler's own fault) is the server's error,
        not the client's bad request; an unknown path or method (404, 405) is neither."""
        if code >= 500:
            self.count("errors")
        elif code not in (404, 405):
            self.count("bad_requests")


def positive_seconds(name: str, value: Any) -> float:
    """``value`` (the argument ``name``: a wait, e.g. how long a server's caller waits) as seconds;
    anything but a finite number > 0 is a ValueError naming it."""
    if isinstance(value, bool) or not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name}: must be a finite number of seconds > 0, got {value!r}")
    return float(value)


class ConnectionLimit:
    """Mixin for a ``ThreadingHTTPServer`` (put it first): at most ``max_connections`` open at
    once (one thread each). One more is answered 503 with ``Retry-After: 1`` from the accepting
    thread (a short write into an empty socket buffer does not block) and closed at once, so no
    thread is started for it. A slot is released when its connection is shut down, which
    ``socketserver`` does however the handler ends (reply, error, reset).

    A graceful stop: ``shutdown()`` (no new connections), :meth:`close_idle_reads` (no new
    requests: idle connections close, a request under way is answered, then its connection
    closes), :meth:`wait_closed` where the request threads are daemons, ``server_close()``."""

    max_connections = 256
    # The listen backlog: socketserver's default is 5, so a burst of 50 new clients had some reset
    # by the kernel before accept() ran (ConnectionResetError), not queued and not answered 503.
    request_queue_size = 128
    busy_error_key = "error"  # the message's key in the 503 body
    busy_message = "too many connections: retry"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._connections: set[Any] = set()
        self._conn_lock = threading.Condition()
        super().__init__(*args, **kwargs)
        self.stop_signal = StopSignal()  # made once the socket is bound: a failed bind leaves no pipe open

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._conn_lock:
            full = len(self._connections) >= self.max_connections
            if not full:
                self._connections.add(request)
        if full:
            self.refuse_connection(request)
            return
        super().process_request(request, client_address)  # type: ignore[misc]

    def refuse_connection(self, request: Any) -> None:
        """Over the cap: 503 and close (override where no reply can be written without blocking)."""
        body = json.dumps({self.busy_error_key: self.busy_message, "field": None}).encode() + b"\n"
        try:
            request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                            b"Connection: close\r\nRetry-After: 1\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        except OSError:
            pass
        self.shutdown_request(request)

    def shutdown_request(self, request: Any) -> None:
        with self._conn_lock:
            self._connections.discard(request)
            self._conn_lock.notify_all()
        super().shutdown_request(request)  # type: ignore[misc]

    def open_connections(self) -> int:
        """How many connections hold a slot now."""
        with self._conn_lock:
            return len(self._connections)

    def close_idle_reads(self) -> None:
        """Take no more requests on the open connections: one waiting for its next request (an
        idle keep-alive one, or one that has sent nothing yet) closes at once; one whose request has
        started is served as ever, within its deadlines (``header_timeout_s``, ``body_timeout_s``),
        and closes after its reply (``Connection: close``). Ending the read side of every
        connection instead (``SHUT_RD``) cut the requests still arriving: a body half sent got a
        400, headers half sent a 411 or were served as if complete."""
        self.stop_signal.set()

    def wait_closed(self, timeout_s: float) -> bool:
        """Wait until no connection is open, at most ``timeout_s`` seconds; False if some still
        are. After :meth:`close_idle_reads`, where the request threads are daemons (the
        extender's, the webhook's): ``server_close()`` does not wait for them, and the process
        would end with the replies unsent."""
        end = time.monotonic() + timeout_s
        with self._conn_lock:
            while self._connections:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._conn_lock.wait(left)
        return True

    def server_close(self) -> None:
        signal = getattr(self, "stop_signal", None)  # None: the bind failed inside __init__
        if signal is not None:
            signal.set()  # idle connections close: ThreadingMixIn's join does not wait out their idle timeout
        super().server_close()  # type: ignore[misc]
        if signal is not None:
            signal.close()


def serve_in_thread(server: BaseServer, name: str) -> threading.Thread:
    """Run ``server.serve_forever`` in a daemon thread (short poll, so shutdown is prompt)."""
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, name=name, daemon=True)
    t.start()
    return t


def host_port(host: str, port: int) -> str:
    """``host:port`` as a URL writes it: an IPv6 address in brackets (``[::1]:8443``); ``:::8443``
    reads as nothing in particular."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def listen_address(host: str, port: int) -> tuple[socket.AddressFamily, tuple[Any, ...]]:
    """The family and socket address a server listening on ``host`` binds: the IPv4 address of
    ``host`` where it has one (a name such as ``localhost`` keeps the address it had while every
    server was IPv4-only), else its first IPv6 one (``::1``, ``::``, a name with AAAA records
    only). socket.gaierror (an OSError) where ``host`` does not resolve."""
    if not host:  # socketserver's "" is every IPv4 address (INADDR_ANY), as ever
        return socket.AF_INET, (host, port)
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    for family in (socket.AF_INET, socket.AF_INET6):
        for info in infos:
            if info[0] == family:
                return family, info[4]
    raise socket.gaierror(socket.EAI_FAMILY, f"no IPv4 or IPv6 address for {host!r}")


def listen_error_is_host(exc: OSError) -> bool:
    """Whether a server's failed bind is about its address (not resolved, not this machine's, a
    family the kernel lacks) rather than its port (in use, privileged): the flag an error names."""
    import errno

    return isinstance(exc, socket.gaierror) or exc.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT)


class AnyFamily:
    """Mixin for a socketserver ``TCPServer`` (before it in the bases): it listens on an IPv6
    address as on an IPv4 one (:func:`listen_address`). The stdlib's servers create an AF_INET
    socket whatever the address, so ``::1`` failed with "Address family for hostname not
    supported". On ``::`` (every IPv6 address) it takes IPv4 clients too, as dual-stack servers
    do: IPV6_V6ONLY is cleared, which a kernel with ``bindv6only=1`` would otherwise set."""

    def __init__(self, server_address: tuple[Any, ...], *args: Any, **kwargs: Any) -> None:
        self.address_family, address = listen_address(server_address[0], server_address[1])
        super().__init__(address, *args, **kwargs)  # type: ignore[call-arg]

    def server_bind(self) -> None:
        sock: socket.socket = self.socket  # type: ignore[attr-defined]
        if self.address_family == socket.AF_INET6 and self.server_address[0] == "::":  # type: ignore[attr-defined]
            try:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            except (OSError, AttributeError):  # no dual stack here: IPv6 clients only
                pass
        super().server_bind()  # type: ignore[misc]
