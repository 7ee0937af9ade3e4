"""Action contracts: the conventions a model's actions and observations follow, declared by a
model (`Model.contract`, or a served model's metadata under `contract`) and by a codec (what a
model seen through it must follow), and checked one against the other before any rollout. The
mismatches behind most "0% success" reports are here: a gripper whose sign is flipped, a
rotation in another format, absolute targets where deltas are played, another control rate,
images of another size or flipped, a state vector of another layout.

A field left None (or empty) is not declared, and not checked."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from policybench import keys

ACTIONS = ("eef-delta", "eef-absolute", "joint-delta", "joint-absolute", "joint-velocity")
ROTATIONS = (
    "axis-angle",
    "quaternion-xyzw",
    "quaternion-wxyz",
    "euler-xyz",
    "euler-zyx",
    "rot6d",
    "none",
)
GRIPPERS = ("positive-closes", "negative-closes")
FLIPS = ("none", "vertical", "horizontal", "both")
CONTRACT = "contract"  # the key of a served model's metadata that holds its contract

# How to turn one rotation format into another (scipy.spatial.transform.Rotation).
_FROM = {
    "axis-angle": "Rotation.from_rotvec(r)",
    "quaternion-xyzw": "Rotation.from_quat(r)",
    "quaternion-wxyz": "Rotation.from_quat(r[[1, 2, 3, 0]])",
    "euler-xyz": 'Rotation.from_euler("xyz", r)',
    "euler-zyx": 'Rotation.from_euler("zyx", r)',
    "rot6d": "a rotation matrix from the 6-D columns (Gram-Schmidt), then Rotation.from_matrix",
}
_TO = {
    "axis-angle": ".as_rotvec()",
    "quaternion-xyzw": ".as_quat()",
    "quaternion-wxyz": ".as_quat()[[3, 0, 1, 2]]",
    "euler-xyz": '.as_euler("xyz")',
    "euler-zyx": '.as_euler("zyx")',
    "rot6d": ".as_matrix()[:, :2] flattened",
}


@dataclass(frozen=True)
class Image:
    """A camera as the model takes it: its key, size and flip (from the camera's own view;
    None where the model does not say, as a LeRobot checkpoint's config)."""

    height: int
    width: int
    flip: str | None = "none"

    def __post_init__(self) -> None:
        _check("image flip", self.flip, FLIPS)

    def __str__(self) -> str:
        return f"{self.height}x{self.width}" + (
            "" if self.flip in ("none", None) else f" flipped {self.flip}"
        )

    def differs(self, other: Image) -> bool:
        """Whether the two disagree on what both declare."""
        flips = self.flip is not None and other.flip is not None and self.flip != other.flip
        return (self.height, self.width) != (other.height, other.width) or flips


@dataclass(frozen=True)
class Contract:
    """What a model's actions mean and how its observations look (see the module's doc)."""

    action: str | None = None  # one of ACTIONS
    rotation: str | None = None  # one of ROTATIONS: the action's rotation part
    gripper: str | None = None  # one of GRIPPERS: which sign of the command closes it
    gripper_range: tuple[float, float] | None = None
    control_hz: float | None = None
    # The model's image keys and their Images (given as a mapping, kept as sorted pairs so that a
    # contract, and a codec holding one, stays hashable).
    images: Mapping[str, Image] | tuple[tuple[str, Image], ...] = ()
    state: tuple[str, ...] = ()  # the state vector's layout: "eef_pos:3", "gripper_qpos:2", ...

    def state_names(self, width: int) -> dict[int, str]:
        """Each number of a state vector of `width` named by its part of the layout (`goal_pos[1]`,
        `gripper_opening`); none where the layout does not add up to `width`."""
        parts = [(name, int(size)) for name, _, size in (p.partition(":") for p in self.state)]
        if sum(size for _, size in parts) != width:
            return {}
        names, at = {}, 0
        for name, size in parts:
            for k in range(size):
                names[at + k] = name if size == 1 else f"{name}[{k}]"
            at += size
        return names

    def __post_init__(self) -> None:
        _check("action", self.action, ACTIONS)
        _check("rotation", self.rotation, ROTATIONS)
        _check("gripper", self.gripper, GRIPPERS)
        for part in self.state:
            name, _, size = part.partition(":")
            if not name or not size.isdigit():
                raise ValueError(
                    f"contract state layout: each part is NAME:SIZE (e.g. eef_pos:3), got {part!r}"
                )
        pairs = self.images.items() if isinstance(self.images, Mapping) else self.images
        images = tuple(
            sorted(
                (key, image if isinstance(image, Image) else Image(**image)) for key, image in pairs
            )
        )
        object.__setattr__(self, "images", images)
        if self.gripper_range is not None:
            object.__setattr__(self, "gripper_range", tuple(float(v) for v in self.gripper_range))

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> Contract:
        """A contract from plain data (a served model's metadata); ValueError naming an unknown
        field."""
        known = {name for name in cls.__dataclass_fields__}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(
                f"contract: unknown field {', '.join(unknown)}; the fields are "
                f"{', '.join(sorted(known))}"
            )
        given = dict(data)
        if keys.STATE in given:  # the field `state`: a list in JSON
            given[keys.STATE] = tuple(given[keys.STATE])
        return cls(**given)

    @property
    def cameras(self) -> dict[str, Image]:
        """Its image keys and their Images."""
        return dict(self.images)  # type: ignore[arg-type]

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["images"] = {key: asdict(image) for key, image in self.cameras.items()}
        data[keys.STATE] = list(self.state)
        return {name: value for name, value in data.items() if value not in (None, [], {})}

    def lines(self) -> list[str]:
        """The declared fields, one `name: value` each (`policybench probe` shows them)."""
        shown = []
        for name, value in self.as_json().items():
            if name == "images":
                value = ", ".join(f"{key} {Image(**image)}" for key, image in value.items())
            elif name == keys.STATE:
                value = ", ".join(value)
            shown.append(f"{name}: {value}")
        return shown


def _check(what: str, value: str | None, allowed: Sequence[str]) -> None:
    if value is not None and value not in allowed:
        raise ValueError(f"contract {what}: {value!r} is not one of {', '.join(allowed)}")


def _converted(given: str, wanted: str) -> str:
    """How to turn a rotation of format `given` into `wanted`, as a sentence."""
    if given in _FROM and wanted in _TO:
        return f"convert each action's rotation r with scipy: {_FROM[given]}{_TO[wanted]}"
    return "convert the rotation in the codec"


def mismatches(model: Contract, expected: Contract) -> list[str]:
    """Where `model` (what a model follows) and `expected` (what the Eval, seen through a codec,
    plays and shows) disagree: one line each, with what would convert one into the other."""
    found = []
    if model.action and expected.action and model.action != expected.action:
        found.append(
            f"action: the model answers {model.action} actions, the Eval plays {expected.action}; "
            "convert in the codec (integrate deltas from the current pose, or difference targets)"
        )
    if model.rotation and expected.rotation and model.rotation != expected.rotation:
        found.append(
            f"rotation: the model answers {model.rotation}, the Eval plays {expected.rotation}; "
            f"{_converted(model.rotation, expected.rotation)}"
        )
    if model.gripper and expected.gripper and model.gripper != expected.gripper:
        found.append(
            f"gripper: for the model {_sign(model.gripper)} closes, for the Eval "
            f"{_sign(expected.gripper)}; negate the gripper command"
        )
    if (
        model.gripper_range
        and expected.gripper_range
        and model.gripper_range != expected.gripper_range
    ):
        (a, b), (c, d) = model.gripper_range, expected.gripper_range
        found.append(
            f"gripper range: the model answers in [{a:g}, {b:g}], the Eval plays [{c:g}, {d:g}]; "
            "rescale the gripper command linearly"
        )
    if model.control_hz and expected.control_hz and model.control_hz != expected.control_hz:
        found.append(
            f"control rate: the model acts at {model.control_hz:g} Hz, the Eval steps at "
            f"{expected.control_hz:g} Hz; resample its chunks (or serve a model trained at "
            f"{expected.control_hz:g} Hz)"
        )
    mine_all, shown_all = model.cameras, expected.cameras
    for key in sorted(set(mine_all) & set(shown_all)):
        mine, shown = mine_all[key], shown_all[key]
        if mine.differs(shown):
            found.append(
                f"image {key}: the model takes {mine}, the codec sends {shown}; resize or flip "
                "it in the codec"
            )
    for key in sorted(set(mine_all) - set(shown_all)) if shown_all else ():
        found.append(
            f"image {key}: the model takes it, the codec sends none (it sends "
            f"{', '.join(sorted(shown_all))}); rename a camera to it in the codec"
        )
    if model.state and expected.state and model.state != expected.state:
        found.append(
            f"state: the model reads {', '.join(model.state)}, the codec sends "
            f"{', '.join(expected.state)}; reorder or slice it in the codec"
        )
    return found


def _sign(gripper: str) -> str:
    return "a positive command" if gripper == "positive-closes" else "a negative command"


def contract_of(model: Any) -> Contract | None:
    """What `model` declares: its `contract` (a Contract, or plain data), else none."""
    declared = getattr(model, CONTRACT, None)
    if declared is None or isinstance(declared, Contract):
        return declared
    if isinstance(declared, Mapping):
        return Contract.of(declared)
    raise TypeError(
        f"a model's contract must be a Contract or a mapping, got {type(declared).__name__}"
    )


def actions_only(contract: Contract | None) -> Contract | None:
    """What of `contract` an env shows a model that sees it as it is: its actions' conventions
    and rate, not a codec's image keys or state layout."""
    return None if contract is None else replace(contract, images=(), state=())
