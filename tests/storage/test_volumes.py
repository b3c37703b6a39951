import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from storage.volumes import (
    BucketNameError,
    Mode,
    VolumeSpec,
    VolumeSpecError,
    check_mount_paths,
    parse_volume_spec,
    parse_volume_specs,
    render_volume_spec,
    validate_bucket_name,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("data@GRA:/workspace/data", VolumeSpec("data", "GRA", "", "/workspace/data", Mode.RO)),
        (
            "my-bucket@GRA/dataset:/workspace/data:ro",
            VolumeSpec("my-bucket", "GRA", "dataset", "/workspace/data", Mode.RO),
        ),
        (
            "my-bucket@GRA/output/run 1:/workspace/output:rw",
            VolumeSpec("my-bucket", "GRA", "output/run 1", "/workspace/output", Mode.RW),
        ),
        ("abc@L/a/b/:/workspace/x/:rwd", VolumeSpec("abc", "L", "a/b", "/workspace/x", Mode.RWD)),
        ("abc@l-2_x:/workspace", VolumeSpec("abc", "l-2_x", "", "/workspace", Mode.RO)),
        ("abc@A/ünï cödé:/workspace/ü", VolumeSpec("abc", "A", "ünï cödé", "/workspace/ü")),
    ],
)
def test_parse_valid_specs(text: str, expected: VolumeSpec) -> None:
    assert parse_volume_spec(text) == expected


@pytest.mark.parametrize(
    ("text", "fragment", "position"),
    [
        ("", "empty volume spec", 0),
        ("mybucket:/workspace/x", "missing '@<ALIAS>'", 8),
        ("mybucket", "missing '@<ALIAS>'", 8),
        ("@GRA:/workspace/x", "missing bucket name", 0),
        ("My-bucket@GRA:/workspace/x", "bad bucket name: uppercase letter 'M'", 0),
        ("ab@GRA:/workspace/x", "too short", 2),
        ("a..b@GRA:/workspace/x", "two adjacent dots", 1),
        ("abc@:/workspace/x", "missing datastore alias", 4),
        ("abc@/p:/workspace/x", "missing datastore alias", 4),
        ("abc@1GRA:/workspace/x", "must start with a letter", 4),
        ("abc@GR A:/workspace/x", "invalid character ' '", 6),
        ("abc@G@A:/workspace/x", "invalid character '@'", 5),
        ("abc@GRA", "missing ':<mount path>'", 7),
        ("abc@GRA/data", "missing ':<mount path>'", 12),
        ("abc@GRA/:/workspace/x", "empty prefix", 8),
        ("abc@GRA/a//b:/workspace/x", "'//'", 10),
        ("abc@GRA/a/../b:/workspace/x", "'..'", 10),
        ("abc@GRA/./b:/workspace/x", "'.'", 8),
        ("abc@GRA/a\tb:/workspace/x", "control or invalid character", 9),
        ("abc@GRA:", "empty mount path", 8),
        ("abc@GRA:workspace/x", "not absolute", 8),
        ("abc@GRA:/etc/passwd", "outside /workspace", 8),
        ("abc@GRA:/workspacex", "outside /workspace", 8),
        ("abc@GRA:/workspace/../etc", "'..' segment", 19),
        ("abc@GRA:/workspace/./x", "'.' segment", 19),
        ("abc@GRA:/workspace//x", "'//'", 18),
        ("abc@GRA:/workspace/x:", "empty mode", 21),
        ("abc@GRA:/workspace/x:RW", "unknown mode 'RW'", 21),
        ("abc@GRA:/workspace/x:rx", "unknown mode 'rx'; expected ro, rw or rwd", 21),
        ("abc@GRA:/workspace/x:rw:", "one ':' too many", 23),
        ("abc@GRA/p:q:/workspace/x:rw", "one ':' too many", 24),
    ],
)
def test_errors_say_what_and_where(text: str, fragment: str, position: int) -> None:
    with pytest.raises(VolumeSpecError) as caught:
        parse_volume_spec(text)
    assert fragment in caught.value.message
    assert caught.value.position == position
    assert caught.value.text == text
    assert f"at position {position}" in str(caught.value)


def test_long_prefix_is_refused() -> None:
    with pytest.raises(VolumeSpecError, match="longer than 1024 bytes"):
        parse_volume_spec("abc@A/" + "é" * 600 + ":/workspace/x")


def test_render_writes_the_canonical_form() -> None:
    spec = parse_volume_spec("abc@GRA/data/:/workspace/data/")
    assert render_volume_spec(spec) == "abc@GRA/data:/workspace/data:ro"
    assert render_volume_spec(VolumeSpec("abc", "GRA", "", "/workspace", Mode.RWD)) == (
        "abc@GRA:/workspace:rwd"
    )


def test_mount_paths_must_not_repeat_or_nest() -> None:
    data = parse_volume_spec("abc@A:/workspace/data")
    output = parse_volume_spec("out@A:/workspace/output:rw")
    check_mount_paths([data, output])
    with pytest.raises(VolumeSpecError, match="use the same mount path /workspace/data") as same:
        check_mount_paths([data, output, parse_volume_spec("xyz@B:/workspace/data:rw")])
    assert "'abc@A:/workspace/data:ro'" in same.value.message
    assert "'xyz@B:/workspace/data:rw'" in same.value.message
    nested = parse_volume_spec("xyz@B:/workspace/data/sub")
    with pytest.raises(VolumeSpecError, match=r"/workspace/data/sub is inside /workspace/data"):
        check_mount_paths([nested, data])
    with pytest.raises(VolumeSpecError, match="nested"):
        check_mount_paths([parse_volume_spec("xyz@B:/workspace"), output])
    # a shared name prefix is not nesting
    check_mount_paths([data, parse_volume_spec("xyz@B:/workspace/data2")])


def test_parse_volume_specs_checks_the_whole_workload() -> None:
    assert len(parse_volume_specs(["abc@A:/workspace/a", "abc@A:/workspace/b:rw"])) == 2
    with pytest.raises(VolumeSpecError, match="same mount path"):
        parse_volume_specs(["abc@A:/workspace/a", "abd@A:/workspace/a/"])


def _valid_bucket(name: str) -> bool:
    try:
        validate_bucket_name(name)
    except BucketNameError:
        return False
    return True


_label = st.text(string.ascii_lowercase + string.digits, min_size=1, max_size=10)
_buckets = st.lists(_label, min_size=1, max_size=4).map(".".join).filter(_valid_bucket)
_aliases = st.from_regex(r"[A-Za-z][A-Za-z0-9_-]{0,31}", fullmatch=True)
_segment_chars = st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="/:\x7f")
_segments = st.text(_segment_chars, min_size=1, max_size=12).filter(lambda s: s not in (".", ".."))
_prefixes = st.one_of(st.just(""), st.lists(_segments, min_size=1, max_size=4).map("/".join))
_mounts = st.lists(_segments, max_size=4).map(lambda parts: "/".join(["/workspace", *parts]))
_specs = st.builds(
    VolumeSpec,
    bucket=_buckets,
    alias=_aliases,
    prefix=_prefixes,
    mount_path=_mounts,
    mode=st.sampled_from(Mode),
)


@given(_specs)
def test_parse_render_round_trip(spec: VolumeSpec) -> None:
    assert parse_volume_spec(render_volume_spec(spec)) == spec


@given(st.text())
def test_arbitrary_text_raises_only_volume_spec_error(text: str) -> None:
    try:
        spec = parse_volume_spec(text)
    except VolumeSpecError as error:
        assert error.position is not None
        assert 0 <= error.position <= len(text)
    else:
        assert parse_volume_spec(render_volume_spec(spec)) == spec


_pieces = st.sampled_from(["/", ":", "/workspace", "..", "//", "rw", "rwd", "ro", "x", " ", "."])
_near_specs = st.builds(
    lambda bucket, alias, rest: f"{bucket}@{alias}{''.join(rest)}",
    st.text("abc.-1A_ ", max_size=8),
    st.text("GRA-_1@/ ", max_size=6),
    st.lists(_pieces, max_size=12),
)


@given(_near_specs)
def test_almost_valid_text_raises_only_volume_spec_error(text: str) -> None:
    try:
        parse_volume_spec(text)
    except VolumeSpecError as error:
        assert error.position is not None
        assert 0 <= error.position <= len(text)
