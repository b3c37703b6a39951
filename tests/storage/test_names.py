import pytest

from storage.names import AliasError, BucketNameError, validate_alias, validate_bucket_name


@pytest.mark.parametrize(
    "name",
    ["abc", "my-bucket", "my.bucket.1", "0-data", "a" * 63, "192.168.5", "xn-abc", "s3alias"],
)
def test_valid_bucket_names(name: str) -> None:
    assert validate_bucket_name(name) is None


@pytest.mark.parametrize(
    ("name", "fragment", "position"),
    [
        ("", "empty", 0),
        ("ab", "too short (2 characters; at least 3)", 2),
        ("a" * 64, "too long (64 characters; at most 63)", 63),
        ("myBucket", "uppercase letter 'B' at position 2", 2),
        ("my_bucket", "invalid character '_' at position 2", 2),
        ("my bucket", "invalid character ' ' at position 2", 2),
        ("bück", "invalid character 'ü' at position 1", 1),
        ("-abc", "must start with a lowercase letter or digit, not '-'", 0),
        (".abc", "must start with a lowercase letter or digit, not '.'", 0),
        ("abc-", "must end with a lowercase letter or digit, not '-'", 3),
        ("abc.", "must end with a lowercase letter or digit, not '.'", 3),
        ("ab..cd", "two adjacent dots at position 2", 2),
        ("ab.-cd", "a hyphen after a dot at position 2", 2),
        ("ab-.cd", "a dot after a hyphen at position 2", 2),
        ("192.168.5.4", "formatted like an IP address", 0),
        ("xn--bucket", "must not start with the reserved 'xn--'", 0),
        ("sthree-data", "must not start with the reserved 'sthree-'", 0),
        ("amzn-s3-demo-x", "must not start with the reserved 'amzn-s3-demo-'", 0),
        ("data-s3alias", "must not end with the reserved '-s3alias'", 4),
        ("data--ol-s3", "must not end with the reserved '--ol-s3'", 4),
        ("data.mrap", "must not end with the reserved '.mrap'", 4),
        ("data--x-s3", "must not end with the reserved '--x-s3'", 4),
    ],
)
def test_each_bucket_rule_has_its_message(name: str, fragment: str, position: int) -> None:
    with pytest.raises(BucketNameError) as caught:
        validate_bucket_name(name)
    assert fragment in caught.value.message
    assert caught.value.position == position
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize("alias", ["GRA", "a", "LOCAL", "my-store_2", "A" * 32])
def test_valid_aliases(alias: str) -> None:
    assert validate_alias(alias) is None


@pytest.mark.parametrize(
    ("alias", "fragment", "position"),
    [
        ("", "empty", 0),
        ("1GRA", "must start with a letter", 0),
        ("_x", "must start with a letter", 0),
        ("GR A", "invalid character ' ' at position 2", 2),
        ("GRÄ", "invalid character 'Ä' at position 2", 2),
        ("A" * 33, "too long (33 characters; at most 32)", 32),
    ],
)
def test_bad_aliases(alias: str, fragment: str, position: int) -> None:
    with pytest.raises(AliasError) as caught:
        validate_alias(alias)
    assert fragment in caught.value.message
    assert caught.value.position == position
