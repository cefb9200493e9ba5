"""`routerscope.router.window`: what an input takes of the device's window (its own tokenizer's count, else an
upper bound), the room the window leaves, and an input cut until it fits."""

from __future__ import annotations

from routerscope.router.backends import Prompt
from routerscope.router.policy import Capability
from routerscope.router.window import MAX_COUNTED_CHARS, DeviceWindow, token_bound


class WordCounter:
    """A device whose tokenizer counts words (None: busy, as a model worker mid-generation answers)."""

    def __init__(self, context_tokens=None, busy=False):
        self.context_tokens, self.busy, self.counted = context_tokens, busy, 0

    def count_tokens(self, text):
        self.counted += 1
        return None if self.busy else len(str(text).split())


def test_without_a_tokenizer_the_bound_is_a_token_a_byte_plus_the_templates_markers():
    assert token_bound("héllo") == 6 + 8 + 2  # é is 2 bytes; one message's markers, and the template's
    assert token_bound(Prompt([{"role": "system", "content": "ab"}, {"role": "user", "content": "c"}])) == 4 + 16 + 2
    window = DeviceWindow(object())
    assert window.count("four words right here") is None
    assert window.size("four words right here", None, 0) == 21 + 10  # 21 bytes, and the markers
    assert window.size("four words right here", None, 40) == 40  # never less than the gateway's count


def test_the_devices_own_count_decides_when_it_has_one():
    device = WordCounter()
    window = DeviceWindow(device)
    assert window.count("four words right here") == 4
    assert window.size("four words right here", 4, 30) == 4
    assert DeviceWindow(WordCounter(busy=True)).count("a b") is None  # busy: the bound decides
    assert window.count("x" * (MAX_COUNTED_CHARS + 1)) is None and device.counted == 1  # never tokenized


def test_the_room_is_the_smaller_of_the_capability_and_the_context_less_the_output():
    cap = Capability(supported=True, max_input_tokens=1000, max_output_tokens=64, threshold=0.5)
    assert DeviceWindow(WordCounter(context_tokens=512)).room(cap, 64) == 448
    assert DeviceWindow(WordCounter(context_tokens=4096)).room(cap, 64) == 1000
    assert DeviceWindow(WordCounter()).room(Capability(supported=False), 64) is None


def test_an_input_over_the_room_is_cut_until_it_fits():
    window = DeviceWindow(WordCounter())
    text = " ".join(f"w{i}" for i in range(100))
    cut, size = window.cut(text, room=40, tokens=100)
    assert size <= 40 and size == len(cut.split()) and cut.startswith("w0 ") and cut.endswith(" w99")
