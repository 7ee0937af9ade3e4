"""The wire codec is openpi's msgpack_numpy layout, byte for byte, in both directions; it refuses
what openpi refuses and frames that are too large or not msgpack, with a clear error."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from policybench.serve.wire import WireError, packb, unpackb

DTYPES = ["|b1", "|u1", "<u2", "<u4", "<u8", "|i1", "<i2", "<i4", "<i8", "<f2", "<f4", "<f8"]
DTYPES += [">f4", ">i8", "|S5", "<U3"]
SHAPES = [(), (0,), (3,), (2, 3), (1, 8, 8, 3), (2, 1, 3, 1)]


def documented_array(array: np.ndarray) -> bytes:
    """An array frame built by hand from openpi's documented layout."""
    tagged = {
        b"__ndarray__": True,
        b"data": array.tobytes(),
        b"dtype": array.dtype.str,
        b"shape": array.shape,
    }
    return msgpack.packb(tagged)


def test_a_small_array_is_exactly_the_documented_bytes():
    frame = packb(np.array([1, 2], dtype=np.uint8))
    expected = (
        b"\x84\xc4\x0b__ndarray__\xc3\xc4\x04data\xc4\x02\x01\x02"
        b"\xc4\x05dtype\xa3|u1\xc4\x05shape\x91\x02"
    )
    assert frame == expected


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_every_dtype_and_shape_matches_the_documented_layout_both_ways(dtype, shape):
    rng = np.random.default_rng(0)
    array = np.asarray(rng.integers(0, 100, size=shape)).astype(dtype)
    assert packb(array) == documented_array(array)
    back = unpackb(documented_array(array))
    assert back.dtype == array.dtype and back.shape == array.shape
    np.testing.assert_array_equal(back, array)
    back[...] = back  # a decoded array is writable


@pytest.mark.parametrize(
    "scalar", [np.float32(1.5), np.int64(-7), np.uint8(200), np.bool_(True), np.float16(0.25)]
)
def test_numpy_scalars_travel_as_npgeneric_maps(scalar):
    documented = msgpack.packb(
        {b"__npgeneric__": True, b"data": scalar.item(), b"dtype": scalar.dtype.str}
    )
    assert packb(scalar) == documented
    back = unpackb(documented)
    assert type(back) is type(scalar) and back == scalar


def test_float64_scalars_travel_as_plain_floats_as_in_openpi():
    # np.float64 subclasses float, so msgpack writes it without asking the numpy hook.
    assert packb(np.float64(2.5)) == msgpack.packb(2.5)


def test_nested_maps_and_lists_round_trip():
    message = {
        "observation/state": np.arange(8, dtype=np.float32),
        "images": {"top": np.zeros((4, 4, 3), np.uint8), "wrist": np.ones((2, 2, 3), np.uint8)},
        "prompt": "pick up the cube",
        "history": [np.int32(3), 1.5, None, b"raw"],
    }
    back = unpackb(packb(message))
    assert back["prompt"] == "pick up the cube"
    assert back["history"][0] == np.int32(3) and back["history"][1:] == [1.5, None, b"raw"]
    np.testing.assert_array_equal(back["images"]["wrist"], message["images"]["wrist"])
    assert back["observation/state"].dtype == np.float32


@pytest.mark.parametrize(
    "value",
    [np.array([1, "a"], dtype=object), np.zeros(2, np.complex64), np.zeros(2, "V4")],
    ids=["object", "complex", "void"],
)
def test_object_void_and_complex_dtypes_are_refused_when_sent(value):
    with pytest.raises(WireError, match=r"cannot travel over the openpi wire"):
        packb({"x": value})


def test_a_complex_array_frame_is_refused_when_received():
    frame = msgpack.packb(
        {b"__ndarray__": True, b"data": b"\0" * 16, b"dtype": "<c16", b"shape": (1,)}
    )
    with pytest.raises(WireError, match="complex"):
        unpackb(frame)


def test_a_frame_over_the_limit_is_refused_with_its_size():
    frame = packb(np.zeros(1000, np.uint8))
    with pytest.raises(WireError, match=rf"frame of {len(frame)} bytes exceeds the limit of 500"):
        unpackb(frame, max_bytes=500)


@pytest.mark.parametrize(
    "frame",
    [
        b"\xc1",  # never used in msgpack
        b"\x92\x01",  # truncated list
        b"\x81\xc4\x0b__ndarray__\xc3",  # array without data
        documented_array(np.zeros(3, np.float32))[:-1] + b"\x04",  # shape disagrees with data
    ],
    ids=["reserved-byte", "truncated", "no-data", "wrong-shape"],
)
def test_garbage_frames_raise_a_wire_error(frame):
    with pytest.raises(WireError, match="not an openpi msgpack message"):
        unpackb(frame)


@settings(max_examples=60, deadline=None)
@given(
    hnp.arrays(
        dtype=st.one_of(
            hnp.boolean_dtypes(),
            hnp.integer_dtypes(),
            hnp.unsigned_integer_dtypes(),
            hnp.floating_dtypes(),
        ),
        shape=hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5),
    )
)
def test_any_numeric_array_round_trips_bit_exactly(array):
    back = unpackb(packb({"a": array}))["a"]
    assert packb(array) == documented_array(array)
    assert back.dtype == array.dtype and back.shape == array.shape
    assert back.tobytes() == array.tobytes()


def test_read_only_decoding_hands_out_views_of_the_decoded_bytes_without_a_copy():
    array = np.arange(12, dtype="<f4").reshape(3, 4)
    back = unpackb(packb({"a": array}), writable=False)["a"]
    assert not back.flags.writeable and not back.flags.owndata
    assert back.dtype == array.dtype and back.tobytes() == array.tobytes()
    with pytest.raises(ValueError, match="read-only"):
        back[0, 0] = 1.0
    assert unpackb(packb(array)).flags.writeable  # the default stays a writable copy


@pytest.mark.parametrize(
    "array",
    [
        np.arange(24, dtype="<i4").reshape(4, 6)[:, ::2],
        np.asfortranarray(np.arange(6, dtype="<f8").reshape(2, 3)),
        np.arange(24, dtype="|u1").reshape(2, 3, 4).transpose(2, 0, 1),
    ],
    ids=["strided", "fortran", "transposed"],
)
def test_non_contiguous_arrays_travel_in_c_order(array):
    assert packb(array) == documented_array(array)
    np.testing.assert_array_equal(unpackb(packb(array)), array)
