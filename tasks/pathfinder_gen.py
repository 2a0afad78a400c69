"""Pathfinder-style image generator (our own implementation of the task of Linsley et al. 2018).

An image shows dashed curves ("snakes") made of short line segments ("paddles") and two round
markers. The label is 1 when both markers sit on the two ends of the same curve, 0 when they sit on
two different curves. Every image holds two *target* snakes of ``contour_length`` paddles that start
``seed_distance`` apart, plus short distractor snakes; a positive image marks both ends of one
target snake, a negative one marks one end of each, so both classes carry the same amount of ink
(the design of the original generator, github.com/drewlinsley/pathfinder ``snakes2.py``).

How a snake grows (facts from ``snakes.py`` of the original generator, re-implemented here):
  * a paddle is a segment of ``paddle_length`` px; consecutive paddles are separated by a gap of
    ``2 * margin`` px with the turn taken in the middle of the gap (the original's pivot lies
    ``margin`` past the last paddle's end and the next paddle starts ``margin`` after the pivot);
  * the turn angle ``delta`` between consecutive paddles has weight ``cos(min(continuity*|delta|,
    pi/2))**2`` — turns beyond ``pi / (2*continuity)`` are impossible (continuity 1.0: up to 90°,
    1.8: up to 50°) — among the directions that keep the paddle clear of all other ink;
  * the first target seed lies at least ``2 * seed_distance`` from the image border, the second
    exactly ``seed_distance`` from the first, initial directions are uniform, and the two targets
    grow one paddle each in turn;
  * distractor snakes have ``contour_length // 3`` paddles (Python 2 integer division in the
    original wrapper) and there are ``distractor_budget // distractor_length`` of them; a distractor
    that cannot be placed after ``max_distractor_tries`` tries is dropped, as in the original
    (``allow_incomplete=True``);
  * distractors are placed and grown after the targets, with five tries each; the markers sit on
    the targets' ends.

Seed directions (a fact of the original's code as it ran, measured by running it): the first
paddle of the first target and of every distractor is placed by dilating the occupied mask with
the paddle's footprint (OpenCV ``cv2.dilate``). The footprint's anchor is not on the paddle, and
OpenCV pads the image with -inf for a dilation, so for most directions some border pixels come out
negative and the original's ``find_available_coordinates`` then reports no free place at all (its
"mystery" branch): the seed fails. Only directions in a window survive: [-150, -121] degrees at size
32 (30 of 360), [-180, -85] at 64 (95 of 360; -135 also fails), all but a few at 128 and 256
(``seed_orientations``). So the first target always starts in that window (the original retries
the image until it does), and a distractor try whose uniformly drawn direction falls outside it
fails. This is why LRA's small images hold few distractors: at size 32 the original placed 1.19
of 5 per image at contour length 14 and 3.26 of 10 at length 6 (100 images each); we mimic the
window and the five tries.

How an image is rendered (facts from ``draw_line_n_mask`` in ``snakes.py`` and ``draw_circle`` /
``from_wrapper`` in ``snakes2.py`` of the original, commit ab9c130, which saved the LRA data with
``scipy.misc.imresize`` / ``imsave``; re-implemented here with Pillow):
  * every paddle is drawn on its own square canvas ``antialias_scale`` (2) times finer than the
    image: a hard-edged (not anti-aliased) PIL line of width ``round(thickness * scale)`` and
    length ``paddle_length * scale`` fine pixels, starting at the canvas centre. The canvas has
    ``2 * k * scale + 1`` fine pixels a side, ``k = paddle_length + ceil(thickness) + margin``, and
    is shrunk with Lanczos (PIL) to ``2 * k + 1`` pixels, quantised to 8 bits (negative ringing
    clips to 0), scaled by the paddle's contrast and placed with its centre on a whole pixel: the
    seed end of a snake's first paddle, the far end of every later one (where the next marker or
    pivot is measured from). Paddles combine by maximum;
  * target paddles have contrast ``snake_contrast * paddle_contrast``, distractor paddles
    ``snake_contrast`` alone (the original hands distractors the snake contrast list only);
  * each marker is a disk of ``marker_radius * scale`` fine pixels around its whole pixel (scaled
    as the original, whose fine pixel ``c * scale`` is the centre) on the fine canvas, shrunk with
    Lanczos to the image, quantised to 8 bits and combined by maximum at intensity 1.0;
  * the image is bytescaled: min..max stretched to 0..255 and rounded half up (``imsave`` of a
    float image). The faint Lanczos ringing (values 1-15) around every paddle is part of the data:
    LRA feeds the raw pixel values as tokens.

Where we deviate, and why:
  * Clearance: a new paddle must keep ``2 * margin + 1`` px of empty space (edge to edge) from every
    other snake, from the markers and from its own non-adjacent paddles. The original only required
    the footprints dilated by ``margin`` not to overlap, which lets two snakes come as close as the
    gap inside one snake, so that no observer can tell from the pixels whether the markers are
    connected. One more pixel makes the label decidable from the image alone (our tests check it).
  * Markers are reserved while the targets grow (the origin marker before, the terminal marker when
    its snake is complete) and everything else keeps clear of them; the original drew them last,
    so a distractor could touch a marker.
  * Dead ends: the original restarted the whole image when a target snake could not be extended;
    we first backtrack (drop the snake's last paddles, more after repeated dead ends) and only
    restart after ``8 * contour_length`` dead ends, and we never pick a direction from which the
    snake can neither run straight to its full length nor turn away from the border in time (a
    certain dead end; see ``_Drawing._fits``). With the LRA sizes (e.g. 14 paddles of 5 px plus
    gaps, about 100 px of contour in a 64 px image) whole restarts succeed in well under 1% of the
    tries in our measurements, so restarts alone are far too slow. Backtracking samples from a slightly
    different distribution than full restarts (contours that fold near the border are a bit more
    frequent). A snake whose *first* paddle is walled in (nothing left to drop) gives up at once:
    the target attempt restarts, the distractor try fails and the next try draws new places
    (generator version 2; version 1 kept retrying it, which almost never worked: at size 32 only
    2% of such distractors were completed, for a third of all dead-end work). At size 32 this
    leaves the mean number of distractors per image at 1.61 instead of 1.68 (300 images).
  * Directions are continuous (``direction_candidates`` evenly spaced turns with a random offset);
    the original steps between whole pixels, so its turns take the few directions of whole-pixel
    displacements and its steps vary in length by up to a pixel. Like the original we put each
    paddle's anchor (and each marker) on a whole pixel and its other end on the fine grid (rounded
    up), before the clearance test, so that the test sees what is drawn. The continuous directions
    spread paddles a little more than the original: at size 32 our images have 11-13% more
    nonzero pixels and 18% more faint ones for the same amount of bright ink (see tasks/README.md).
  * No single-paddle clutter: the original wrapper script sets ``use_single_paddles = False`` and the
    LRA notes do not change it.
  * Each sample is a pure function of (seed, split, index): any subset can be regenerated alone and
    in parallel, and the first K images of a larger set equal a set of K images.

Per-size parameters (``SIZE_PRESETS``) are those the LRA data were made with, from the docstrings of
``lra_benchmarks/data/pathfinder.py`` (Tay et al. 2021) and, where those do not customise a value,
the defaults of the original ``snakes2_wrapper.py`` (paddle length 5, seed distance 27, padding 22,
paddle contrast 1). Every size uses ``antialias_scale = 2`` (LRA's notes set it last, after a 4).
"""
from __future__ import annotations

import dataclasses
import functools
import math
import random
from typing import Sequence

import numpy as np
from PIL import Image, ImageDraw

# Bump when the drawing algorithm changes: it is part of every cache key.
# 2: a snake whose first paddle is walled in gives up at once (see "Dead ends" above).
# 3: rendered as the original: each paddle drawn at antialias_scale and Lanczos-shrunk, markers
#    likewise, the image bytescaled; distractors drawn without the targets' paddle contrast.
GENERATOR_VERSION = 3

DIFFICULTIES = {"easy": 6, "intermediate": 9, "hard": 14}
# Folder names of the official release for each contour length.
OFFICIAL_FOLDERS = {6: "curv_baseline", 9: "curv_contour_length_9", 14: "curv_contour_length_14"}


@dataclasses.dataclass(frozen=True)
class PathfinderParams:
    """Everything that determines the images apart from (seed, split, index)."""

    size: int
    contour_length: int = 14
    padding: int = 1
    paddle_length: float = 5.0
    paddle_thickness: float = 1.5
    paddle_margins: tuple[int, ...] = (1,)    # one is drawn per image
    marker_radius: float = 3.0
    seed_distance: float = 20.0
    continuity: float = 1.8
    distractor_budget: int = 20                # number of distractors = budget // distractor length
    snake_contrast: float = 1.0                # intensity of every paddle; markers are drawn at 1.0
    paddle_contrast: float = 1.0               # extra factor on the target snakes' paddles only
    antialias_scale: int = 2                   # paddles and markers are drawn this much finer
    extra_gap: float = 1.0                     # px of clearance beyond the original's 2 * margin
    max_distractor_tries: int = 5              # original: retrial count 4, tried while count <= 4
    # Directions (degrees, [lo, hi), 0 = +x, 90 = +y = down) that the first paddle of the first target
    # and of every distractor can take; see "Seed directions" in the module docstring.
    seed_orientations: tuple[float, float] = (-180.0, 180.0)
    direction_candidates: int = 12             # directions evaluated per paddle

    def __post_init__(self):
        if self.size < 8 or self.contour_length < 1 or self.paddle_length <= 0:
            raise ValueError(f"invalid Pathfinder parameters: {self}")
        if not self.paddle_margins or min(self.paddle_margins) < 0:
            raise ValueError(f"paddle_margins must be non-negative integers, got {self.paddle_margins}")
        # The clearance test skips the segment-crossing check; that is exact only while the
        # required distance exceeds half a paddle (true for every preset by a wide margin).
        if 2 * min(self.paddle_margins) + self.extra_gap + self.paddle_thickness <= self.paddle_length / 2:
            raise ValueError("paddle_length too long for the clearance test: need "
                             "2*margin + 1 + thickness > paddle_length / 2")
        lo, hi = self.seed_orientations
        if not -180.0 <= lo < hi <= 180.0:
            raise ValueError(f"seed_orientations must be degrees with -180 <= lo < hi <= 180, "
                             f"got {self.seed_orientations}")
        # The original's fine canvas holds whole pixels only (its 'thickness does not break even').
        if not float(self.paddle_length).is_integer():
            raise ValueError(f"paddle_length must be a whole number of pixels, got {self.paddle_length}")
        if not (isinstance(self.antialias_scale, int) and self.antialias_scale >= 1):
            raise ValueError(f"antialias_scale must be a positive int, got {self.antialias_scale!r}")
        if not float(self.paddle_thickness * self.antialias_scale).is_integer():
            raise ValueError(f"paddle_thickness * antialias_scale must be a whole number of fine pixels, "
                             f"got {self.paddle_thickness} * {self.antialias_scale}")

    @property
    def distractor_length(self) -> int:
        return max(1, self.contour_length // 3)

    @property
    def num_distractors(self) -> int:
        return self.distractor_budget // self.distractor_length

    def key(self) -> dict:
        """Cache key: every parameter plus the generator version."""
        return {"generator": "pathfinder", "generator_version": GENERATOR_VERSION,
                **dataclasses.asdict(self)}


# Per-size settings of the LRA data (see the module docstring for the sources).
SIZE_PRESETS: dict[int, dict] = {
    # LRA Pathfinder32: margin 1, padding 1, paddle 2, marker 1.5, thickness 0.5, seed distance 7,
    # continuity 1.0, 20 // dl distractors, snake contrast 2, paddle contrast 0.75.
    32: dict(padding=1, paddle_length=2, paddle_thickness=0.5, paddle_margins=(1,), marker_radius=1.5,
             seed_distance=7, continuity=1.0, distractor_budget=20, snake_contrast=2.0,
             paddle_contrast=0.75, seed_orientations=(-150, -120)),
    # LRA Pathfinder64: padding 1, margin 1, seed distance 12, marker 2.5, thickness 1,
    # continuity 1.8, 22 / dl distractors, contrast 0.8; paddle length: wrapper default 5.
    64: dict(padding=1, paddle_length=5, paddle_thickness=1, paddle_margins=(1,), marker_radius=2.5,
             seed_distance=12, continuity=1.8, distractor_budget=22, snake_contrast=0.8,
             seed_orientations=(-180, -84)),
    # LRA Pathfinder128 (Path-X): padding 1, margin 2 or 3, seed distance 20, marker 3,
    # thickness 1.5, continuity 1.8, 35 / dl distractors, contrast 0.9; paddle length 5.
    128: dict(padding=1, paddle_length=5, paddle_thickness=1.5, paddle_margins=(2, 3), marker_radius=3,
              seed_distance=20, continuity=1.8, distractor_budget=35, snake_contrast=0.9),
    # LRA Pathfinder256: margin 3, marker 5, thickness 2, continuity 1.8, 30 / dl distractors,
    # contrast 1.0; padding 22, seed distance 27 and paddle length 5 are wrapper defaults.
    256: dict(padding=22, paddle_length=5, paddle_thickness=2, paddle_margins=(3,), marker_radius=5,
              seed_distance=27, continuity=1.8, distractor_budget=30, snake_contrast=1.0),
}


def contour_length_of(difficulty: str | int) -> int:
    """'easy' | 'intermediate' | 'hard' or 6 | 9 | 14 -> contour length."""
    if isinstance(difficulty, str) and difficulty.strip().lower() in DIFFICULTIES:
        return DIFFICULTIES[difficulty.strip().lower()]
    try:
        value = int(difficulty)
    except (TypeError, ValueError):
        value = None
    if value not in OFFICIAL_FOLDERS:
        raise ValueError(f"difficulty must be one of {sorted(DIFFICULTIES)} or a contour length 6, 9 "
                         f"or 14; got {difficulty!r}")
    return value


def params_for(size: int, difficulty: str | int = "hard", **overrides) -> PathfinderParams:
    """The LRA parameters for `size` (32, 64, 128, 256) at `difficulty`, with optional overrides."""
    if size not in SIZE_PRESETS:
        raise ValueError(f"Pathfinder image size must be one of {sorted(SIZE_PRESETS)}, got {size}")
    values = {**SIZE_PRESETS[size], "contour_length": contour_length_of(difficulty), **overrides}
    return PathfinderParams(size=size, **values)


def sample_label(seed: int, split: str, index: int) -> int:
    """Label of sample `index`: each pair (2k, 2k+1) holds one positive and one negative, in an
    order drawn from (seed, split, k), so classes are balanced in every prefix of even length."""
    flip = random.Random(f"pathfinder-label/{seed}/{split}/{index // 2}").getrandbits(1)
    return (index + flip) % 2


def sample_labels(seed: int, split: str, n: int) -> np.ndarray:
    return np.fromiter((sample_label(seed, split, i) for i in range(n)), dtype=np.int64, count=n)


# --------------------------------------------------------------------------------------------
# Geometry: committed shapes and the clearance test (plain Python: the arrays involved are so
# small that numpy's per-call overhead would dominate)
# --------------------------------------------------------------------------------------------
def _half_up(v: float) -> int:
    """Round half up (what the original's bytescale and pixel placement do)."""
    return int(math.floor(v + 0.5))


def _too_close(px, py, ax, ay, dx, dy, inv, need2):
    """Is point (px, py) closer than sqrt(need2) to the segment a + t*(dx, dy), t in [0, 1]?"""
    rx = px - ax
    ry = py - ay
    t = (rx * dx + ry * dy) * inv
    if t < 0.0:
        t = 0.0
    elif t > 1.0:
        t = 1.0
    ex = rx - t * dx
    ey = ry - t * dy
    return ex * ex + ey * ey < need2


# Grid cells are keyed by the integer cx * _CELL_STRIDE + cy (hashing an int is cheaper than a
# tuple); unique while |cy| < _CELL_STRIDE / 2, far beyond any image size.
_CELL_STRIDE = 1 << 20


class _Scene:
    """Committed shapes: segments with a radius (markers are zero-length segments). Each shape is
    registered in every grid cell that its zone of influence (the shape widened by `halo`, the
    largest distance at which it can block anything) overlaps, so a candidate only looks at the
    cells its own bounding box touches. Removed shapes (backtracking) are marked inactive and
    taken out of their cells, so that the buckets hold only live shapes (backtracking removes far
    more shapes than an image keeps; left in place, dead entries made up most of every look-up)."""

    def __init__(self, cell: float, halo: float):
        self.cell = cell
        self.halo = halo
        self.shapes: list[tuple] = []   # (ax, ay, bx, by, dx, dy, 1/|d|^2, radius, xmin, xmax, ymin, ymax)
        self.owner: list[int] = []
        self.is_marker: list[bool] = []
        self.anchor_end: list[bool] = []           # drawn from (bx, by) rather than (ax, ay)
        self.active: list[bool] = []
        self.cells: list[list[list[int]]] = []     # shape -> the buckets that hold it
        self.grid: dict[int, list[int]] = {}       # cx * _CELL_STRIDE + cy -> live shapes

    def add(self, ax, ay, bx, by, radius, owner, marker=False, anchor_end=False) -> int:
        dx = bx - ax
        dy = by - ay
        n2 = dx * dx + dy * dy
        i = len(self.shapes)
        xmin, xmax = (ax, bx) if ax <= bx else (bx, ax)
        ymin, ymax = (ay, by) if ay <= by else (by, ay)
        self.shapes.append((ax, ay, bx, by, dx, dy, 1.0 / n2 if n2 > 0 else 0.0, radius,
                            xmin, xmax, ymin, ymax))
        self.owner.append(owner)
        self.is_marker.append(marker)
        self.anchor_end.append(anchor_end)
        self.active.append(True)
        h = self.halo + radius
        cell = self.cell
        grid = self.grid
        held = []
        cys = range(int((ymin - h) // cell), int((ymax + h) // cell) + 1)
        for cx in range(int((xmin - h) // cell), int((xmax + h) // cell) + 1):
            base = cx * _CELL_STRIDE
            for cy in cys:
                bucket = grid.get(base + cy)
                if bucket is None:
                    bucket = grid[base + cy] = []
                bucket.append(i)
                held.append(bucket)
        self.cells.append(held)
        return i

    def remove(self, i: int) -> None:
        if not self.active[i]:
            return
        self.active[i] = False
        for bucket in self.cells[i]:
            if bucket[-1] == i:         # backtracking removes the newest shapes first
                bucket.pop()
            else:
                bucket.remove(i)

    def live(self) -> list[int]:
        return [i for i, a in enumerate(self.active) if a]

    def near(self, x0, y0, x1, y1) -> list[int]:
        """Shapes that may block something inside the box [x0, x1] x [y0, y1] (may repeat)."""
        cell = self.cell
        grid = self.grid
        out: list[int] = []
        for cx in range(int(min(x0, x1) // cell), int(max(x0, x1) // cell) + 1):
            for cy in range(int(min(y0, y1) // cell), int(max(y0, y1) // cell) + 1):
                bucket = grid.get(cx * _CELL_STRIDE + cy)
                if bucket:
                    out.extend(bucket)
        return out

    def clear(self, ax, ay, bx, by, radius, gap, exempt, candidates) -> bool:
        """Does segment (a, b) of `radius` keep `gap` px of empty space, edge to edge, from every
        shape in `candidates` (live shapes, as `near` returns them) except those in `exempt`? Exact
        segment distance without a crossing test: crossings are caught because the required
        distance exceeds half a paddle (checked in PathfinderParams)."""
        x0, x1 = (ax, bx) if ax <= bx else (bx, ax)
        y0, y1 = (ay, by) if ay <= by else (by, ay)
        dx = bx - ax
        dy = by - ay
        n2 = dx * dx + dy * dy
        inv = 1.0 / n2 if n2 > 0 else 0.0
        shapes = self.shapes
        for i in candidates:
            if i in exempt:
                continue
            sh = shapes[i]
            need = sh[7] + radius + gap
            if sh[8] - need > x1 or sh[9] + need < x0 or sh[10] - need > y1 or sh[11] + need < y0:
                continue
            need2 = need * need
            if (_too_close(ax, ay, sh[0], sh[1], sh[4], sh[5], sh[6], need2)
                    or _too_close(bx, by, sh[0], sh[1], sh[4], sh[5], sh[6], need2)
                    or _too_close(sh[0], sh[1], ax, ay, dx, dy, inv, need2)
                    or _too_close(sh[2], sh[3], ax, ay, dx, dy, inv, need2)):
                return False
        return True


class _Drawing:
    """One image being drawn: target snakes, markers and distractors in a _Scene."""

    def __init__(self, params: PathfinderParams, rng: random.Random):
        p = params
        self.p = p
        self.rng = rng
        self.margin = rng.choice(p.paddle_margins)
        self.r = p.paddle_thickness / 2.0
        self.gap = 2 * self.margin + p.extra_gap
        self.lo = p.padding + self.r
        self.hi = p.size - 1 - p.padding - self.r
        self.max_turn = math.pi / (2.0 * p.continuity)
        self.seed_window = (math.radians(p.seed_orientations[0]), math.radians(p.seed_orientations[1]))
        self.step = p.paddle_length + 2 * self.margin
        # Turning radius of a snake that keeps turning by 80% of the largest turn (turns close to
        # the largest one have almost no weight).
        self.turn_radius = self.step / (2.0 * math.sin(0.8 * self.max_turn / 2.0))
        # A shape can block things up to `halo` + its radius away; cells about twice that size
        # (fewer cells per shape to register; measured faster than cells of one halo).
        halo = max(p.marker_radius, self.r) + self.gap
        self.scene = _Scene(cell=2.0 * max(p.paddle_length, halo), halo=halo)
        self.markers: dict[int, list[int]] = {}     # snake -> scene indices of its markers

    def _fits(self, ax, ay, bx, by, remaining) -> bool:
        """Inside the drawable area, and not a certain dead end: from the end (bx, by) the snake can
        run straight for its `remaining` px or turn away from every border in time. A snake that
        turns as hard as it can moves on a circle of radius `turn_radius`; heading into a wall at
        angle psi from its normal it gets `turn_radius * (1 - sin psi)` closer before it runs
        parallel. Excluding such certain dead ends does not change what the original's
        restart-until-it-fits produces; it only stops wasting time on hopeless snakes."""
        lo = self.lo
        hi = self.hi
        if not (lo <= ax <= hi and lo <= ay <= hi and lo <= bx <= hi and lo <= by <= hi):
            return False
        if remaining <= 0:
            return True
        length = math.hypot(bx - ax, by - ay)
        c = (bx - ax) / length
        s = (by - ay) / length
        for dist, toward, along in ((bx - lo, -c, s), (hi - bx, c, s), (by - lo, -s, c), (hi - by, s, c)):
            if toward > 1e-9 and dist < remaining * toward and dist < self.turn_radius * (1.0 - abs(along)):
                return False
        return True

    # -- paddles --------------------------------------------------------------------------------
    def first_paddle(self, tips, snake, length, exempt=(), headings=None):
        """First paddle of a snake from one of the candidate `tips` (tried in order) with the
        matching one of `headings` (default: a fresh uniform direction for each tip); returns
        (x_end, y_end, heading, scene index, tip) or None."""
        L = self.p.paddle_length
        scale = self.p.antialias_scale
        sc = self.scene
        remaining = (length - 1) * self.step
        for j, (x0, y0) in enumerate(tips):
            theta = self.rng.uniform(-math.pi, math.pi) if headings is None else headings[j]
            # drawn from the tip on a whole pixel to the far end on the fine grid (paddle_patch)
            x0 = math.floor(x0 + 0.5)
            y0 = math.floor(y0 + 0.5)
            x1 = x0 + math.ceil(L * math.cos(theta) * scale) / scale
            y1 = y0 + math.ceil(L * math.sin(theta) * scale) / scale
            if self._fits(x0, y0, x1, y1, remaining) and sc.clear(
                    x0, y0, x1, y1, self.r, self.gap, exempt, sc.near(x0, y0, x1, y1)):
                at = sc.add(x0, y0, x1, y1, self.r, snake)
                return (x1, y1, theta, at, (x0, y0))
        return None

    def next_paddle(self, state, snake, order, length):
        """Extend a snake whose last paddle ends at (x, y) heading theta: draw a direction among
        `direction_candidates` evenly spaced turns (random offset) with weight
        cos(continuity * turn)**2, keep it if the paddle fits and is clear, else draw again among
        the rest. None when no direction works (a dead end).

        This is the generator's hot loop (dead ends alone evaluate every candidate), so
        `_fits`, `_Scene.near` and `_Scene.clear` are inlined here with the same arithmetic."""
        x, y, theta, prev = state[0], state[1], state[2], state[3]
        p = self.p
        g = self.margin
        L = p.paddle_length
        k = p.direction_candidates
        max_turn = self.max_turn
        continuity = p.continuity
        scale = p.antialias_scale
        width = 2.0 * max_turn / k
        u = self.rng.random()
        cos = math.cos
        sin = math.sin
        weights = [cos(((j + u) * width - max_turn) * continuity) ** 2 for j in range(k)]
        total = sum(weights)
        px = x + g * cos(theta)             # the pivot, `margin` past the last paddle's end
        py = y + g * sin(theta)
        sc = self.scene
        shapes = sc.shapes
        grid_get = sc.grid.get
        cell = sc.cell
        radius = self.r
        gap = self.gap
        lo = self.lo
        hi = self.hi
        turn_radius = self.turn_radius
        markers = self.markers.get(snake)
        exempt = (prev, *markers) if markers else (prev,)
        remaining = (length - 1 - order) * self.step
        rand = self.rng.random
        last = k - 1
        hit = -1                            # the shape that blocked the previous candidate
        while total > 1e-12:
            pick = rand() * total
            j = 0
            acc = weights[0]
            while acc <= pick and j < last:
                j += 1
                acc += weights[j]
            while weights[j] <= 0.0:        # floating-point edge: step back to a live candidate
                j -= 1
            heading = theta + ((j + u) * width - max_turn)
            total -= weights[j]
            weights[j] = 0.0
            c = cos(heading)
            s = sin(heading)
            # the next paddle starts `margin` after the pivot; it is drawn from its far end, which
            # lies on a whole pixel, to the near end on the fine grid (see paddle_patch)
            bx = math.floor(px + (g + L) * c + 0.5)
            by = math.floor(py + (g + L) * s + 0.5)
            ax = bx + math.ceil(-L * c * scale) / scale
            ay = by + math.ceil(-L * s * scale) / scale
            # _fits(ax, ay, bx, by, remaining)
            if not (lo <= ax <= hi and lo <= ay <= hi and lo <= bx <= hi and lo <= by <= hi):
                continue
            if remaining > 0:
                length_ = math.hypot(bx - ax, by - ay)
                fc = (bx - ax) / length_
                fs = (by - ay) / length_
                if fc < -1e-9:
                    if bx - lo < remaining * -fc and bx - lo < turn_radius * (1.0 - abs(fs)):
                        continue
                elif fc > 1e-9:
                    if hi - bx < remaining * fc and hi - bx < turn_radius * (1.0 - abs(fs)):
                        continue
                if fs < -1e-9:
                    if by - lo < remaining * -fs and by - lo < turn_radius * (1.0 - abs(fc)):
                        continue
                elif fs > 1e-9:
                    if hi - by < remaining * fs and hi - by < turn_radius * (1.0 - abs(fc)):
                        continue
            # clear(ax, ay, bx, by, radius, gap, exempt, near(ax, ay, bx, by))
            x0, x1 = (ax, bx) if ax <= bx else (bx, ax)
            y0, y1 = (ay, by) if ay <= by else (by, ay)
            dx = bx - ax
            dy = by - ay
            n2 = dx * dx + dy * dy
            inv = 1.0 / n2 if n2 > 0 else 0.0
            # the shape that blocked the previous candidate first: neighbouring candidates are
            # mostly blocked by the same shape
            buckets = [(hit,)] if hit >= 0 else []
            cy0 = int(y0 // cell)
            cy1 = int(y1 // cell) + 1
            for cx in range(int(x0 // cell), int(x1 // cell) + 1):
                for cy in range(cy0, cy1):
                    bucket = grid_get(cx * _CELL_STRIDE + cy)
                    if bucket:
                        buckets.append(bucket)
            blocked = False
            for bucket in buckets:
                for i in bucket:
                    if i in exempt:
                        continue
                    sh = shapes[i]
                    need = sh[7] + radius + gap
                    if sh[8] - need > x1 or sh[9] + need < x0 or sh[10] - need > y1 or sh[11] + need < y0:
                        continue
                    need2 = need * need
                    sax = sh[0]
                    say = sh[1]
                    sdx = sh[4]
                    sdy = sh[5]
                    sinv = sh[6]
                    rx = ax - sax
                    ry = ay - say
                    t = (rx * sdx + ry * sdy) * sinv
                    t = 0.0 if t < 0.0 else (1.0 if t > 1.0 else t)
                    ex = rx - t * sdx
                    ey = ry - t * sdy
                    if ex * ex + ey * ey < need2:
                        blocked = True
                        hit = i
                        break
                    rx = bx - sax
                    ry = by - say
                    t = (rx * sdx + ry * sdy) * sinv
                    t = 0.0 if t < 0.0 else (1.0 if t > 1.0 else t)
                    ex = rx - t * sdx
                    ey = ry - t * sdy
                    if ex * ex + ey * ey < need2:
                        blocked = True
                        hit = i
                        break
                    rx = sax - ax
                    ry = say - ay
                    t = (rx * dx + ry * dy) * inv
                    t = 0.0 if t < 0.0 else (1.0 if t > 1.0 else t)
                    ex = rx - t * dx
                    ey = ry - t * dy
                    if ex * ex + ey * ey < need2:
                        blocked = True
                        hit = i
                        break
                    rx = sh[2] - ax
                    ry = sh[3] - ay
                    t = (rx * dx + ry * dy) * inv
                    t = 0.0 if t < 0.0 else (1.0 if t > 1.0 else t)
                    ex = rx - t * dx
                    ey = ry - t * dy
                    if ex * ex + ey * ey < need2:
                        blocked = True
                        hit = i
                        break
                if blocked:
                    break
            if blocked:
                continue
            at = sc.add(ax, ay, bx, by, radius, snake, anchor_end=True)
            return (bx, by, heading, at)
        return None

    def add_marker(self, x, y, snake, states) -> bool:
        """A marker at (x, y) on `snake` if it keeps clear of every other shape."""
        sc = self.scene
        rm = self.p.marker_radius
        own = {st[3] for st in states} | set(self.markers.get(snake, ()))
        if not sc.clear(x, y, x, y, rm, self.gap, own, sc.near(x, y, x, y)):
            return False
        self.markers.setdefault(snake, []).append(sc.add(x, y, x, y, rm, snake, marker=True))
        return True

    def grow(self, snakes: list[list], ids: list[int], length: int, budget: int, on_complete=None) -> bool:
        """Grow every snake (a list of states, the first paddle placed) to `length` paddles, always
        extending the shortest one, so that they grow in turn. A snake in a dead end backtracks: it
        drops its last paddles (more after repeated dead ends; every third dead end the other
        snakes, which may be what walls it in, drop as many). `on_complete(i, states)` may veto a
        finished snake (a dead end too). Gives up after `budget` dead ends."""
        failures = [0] * len(snakes)
        total = 0
        while True:
            i = 0 if len(snakes) == 1 else min(range(len(snakes)), key=lambda j: len(snakes[j]))
            states = snakes[i]
            if len(states) >= length:
                return True
            nxt = self.next_paddle(states[-1], ids[i], len(states), length)
            if nxt is not None:
                states.append(nxt)
                if len(states) < length or on_complete is None or on_complete(i, states):
                    continue
                self.scene.remove(states.pop()[3])
            elif len(states) == 1:
                # A first paddle with no way on: it cannot be dropped, and retrying it (the same
                # fan of turns, rotated a little) almost never works; give up at once.
                return False
            total += 1
            if total > budget:
                return False
            failures[i] += 1
            drop = 1 + failures[i] // 3
            for j, other in enumerate(snakes):
                if j == i or failures[i] % 3 == 0:
                    for _ in range(min(drop, len(other) - 1)):
                        self.scene.remove(other.pop()[3])

    # -- the image ------------------------------------------------------------------------------
    def targets(self, label: int):
        """Two target snakes from seeds `seed_distance` apart, with the two markers. Returns the
        marker centres or None when this attempt failed."""
        p = self.p
        sd = p.seed_distance
        lo = max(self.lo, min(2 * sd, p.size / 2 - 1))
        hi = min(self.hi, max(p.size - 1 - 2 * sd, p.size / 2))
        x0 = self.rng.uniform(lo, hi)
        y0 = self.rng.uniform(lo, hi)
        phi = self.rng.uniform(-math.pi, math.pi)
        tips = [(_half_up(x0), _half_up(y0)),
                (_half_up(x0 + sd * math.cos(phi)), _half_up(y0 + sd * math.sin(phi)))]
        if not (self.lo <= tips[1][0] <= self.hi and self.lo <= tips[1][1] <= self.hi):
            return None
        origin = self.rng.randrange(2)                      # which target gets the origin marker
        terminal = origin if label == 1 else 1 - origin     # ... and which the terminal marker
        if not self.add_marker(*tips[origin], origin, []):
            return None
        snakes = []
        for snake, tip in enumerate(tips):
            # the first target starts in the seed window; the second one anywhere (as the original)
            headings = [self.rng.uniform(*self.seed_window) for _ in range(8)] if snake == 0 else None
            st = self.first_paddle([tip] * 8, snake, p.contour_length,
                                   exempt=tuple(self.markers.get(snake, ())), headings=headings)
            if st is None:
                return None
            snakes.append([st])
        ends = [tips[origin], None]

        def terminal_marker(i, states):
            if i != terminal:
                return True
            if not self.add_marker(states[-1][0], states[-1][1], terminal, states):
                return False
            ends[1] = (states[-1][0], states[-1][1])
            return True

        if not self.grow(snakes, [0, 1], p.contour_length, budget=8 * p.contour_length,
                         on_complete=terminal_marker):
            return None
        return ends

    def distractors(self) -> int:
        """Short snakes at random free places; one that cannot be completed is dropped. Each try
        draws one uniform direction for the first paddle; outside the seed window the try fails,
        inside it the paddle goes to the first of 16 random places where it fits (the original
        drew one place among all that fit)."""
        p = self.p
        placed = 0
        rand = self.rng.uniform
        lo_window, hi_window = self.seed_window
        for k in range(p.num_distractors):
            snake = 2 + k
            for _ in range(p.max_distractor_tries):
                theta = rand(-math.pi, math.pi)
                if not lo_window <= theta < hi_window:
                    continue
                tips = [(rand(self.lo, self.hi), rand(self.lo, self.hi)) for _ in range(16)]
                st = self.first_paddle(tips, snake, p.distractor_length, headings=[theta] * 16)
                if st is None:
                    continue
                states = [st]
                if self.grow([states], [snake], p.distractor_length, budget=p.distractor_length):
                    placed += 1
                    break
                for state in states:
                    self.scene.remove(state[3])
        return placed


# --------------------------------------------------------------------------------------------
# Rendering (see "How an image is rendered" above)
# --------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=4096)
def paddle_patch(length: int, thickness: float, margin: int, scale: int, dx: int, dy: int) -> np.ndarray:
    """One paddle as the original renders it: a hard-edged line from the centre of a fine canvas to
    (centre + dx, centre + dy) fine pixels, Lanczos-shrunk to (2k+1) x (2k+1) pixels and quantised
    to 8 bits; returned as read-only float64 in [0, 1] whose centre pixel (k, k) is the anchor.
    Paddles differ only in (dx, dy), a few dozen values per preset, hence the cache."""
    k = length + math.ceil(thickness) + margin
    fine = 2 * k * scale + 1
    centre = k * scale
    canvas = Image.new("L", (fine, fine), 0)
    ImageDraw.Draw(canvas).line([(centre, centre), (centre + dx, centre + dy)], fill=255,
                                width=_half_up(thickness * scale))
    small = canvas.resize((2 * k + 1, 2 * k + 1), Image.Resampling.LANCZOS)
    patch = np.asarray(small, dtype=np.float64) / 255.0
    patch.flags.writeable = False
    return patch


def marker_patch(cx: int, cy: int, radius: float, scale: int, size: int) -> tuple[int, int, np.ndarray]:
    """A marker centred on pixel (cx, cy): the fine-canvas disk of `radius * scale` fine pixels
    around fine pixel (cx * scale, cy * scale), Lanczos-shrunk and quantised to 8 bits. Returns
    (top, left, patch). Only a window of the canvas is resized: it reaches far enough beyond the
    disk (Lanczos reads 3 output pixels either side) that every pixel the disk touches sees the
    same input as on the whole canvas, and it is cut at the image border where the canvas is."""
    reach = math.ceil(radius) + 7
    x0, x1 = max(0, cx - reach), min(size, cx + reach + 1)
    y0, y1 = max(0, cy - reach), min(size, cy + reach + 1)
    xs = np.arange(x0 * scale, x1 * scale) - cx * scale
    ys = np.arange(y0 * scale, y1 * scale) - cy * scale
    disk = (xs[None, :] ** 2 + ys[:, None] ** 2) <= (radius * scale) ** 2
    canvas = Image.fromarray(disk.astype(np.uint8) * 255)
    small = canvas.resize((x1 - x0, y1 - y0), Image.Resampling.LANCZOS)
    return y0, x0, np.asarray(small, dtype=np.float64) / 255.0


def _stamp(img: np.ndarray, patch: np.ndarray, top: int, left: int, value: float) -> None:
    """img = max(img, value * patch) with the patch's corner at (top, left), cut at the border."""
    h, w = patch.shape
    y0, x0 = max(top, 0), max(left, 0)
    y1, x1 = min(top + h, img.shape[0]), min(left + w, img.shape[1])
    if y0 >= y1 or x0 >= x1:
        return
    region = img[y0:y1, x0:x1]
    np.maximum(region, patch[y0 - top:y1 - top, x0 - left:x1 - left] * value, out=region)


def render(scene: _Scene, params: PathfinderParams, margin: int) -> np.ndarray:
    """The float image of the live shapes of `scene` (before bytescaling): paddles of the target
    snakes (owners 0 and 1) at snake_contrast * paddle_contrast, distractors at snake_contrast,
    markers at 1.0."""
    p = params
    scale = p.antialias_scale
    length = int(p.paddle_length)
    k = length + math.ceil(p.paddle_thickness) + margin
    img = np.zeros((p.size, p.size), dtype=np.float64)
    for i in scene.live():
        ax, ay, bx, by = scene.shapes[i][:4]
        if scene.is_marker[i]:
            top, left, patch = marker_patch(_half_up(ax), _half_up(ay), p.marker_radius, scale, p.size)
            _stamp(img, patch, top, left, 1.0)
            continue
        if scene.anchor_end[i]:
            ax, ay, bx, by = bx, by, ax, ay
        # the geometry already put the anchor on a whole pixel and the other end on the fine grid
        patch = paddle_patch(length, p.paddle_thickness, margin, scale,
                             _half_up((bx - ax) * scale), _half_up((by - ay) * scale))
        contrast = p.snake_contrast * (p.paddle_contrast if scene.owner[i] < 2 else 1.0)
        _stamp(img, patch, _half_up(ay) - k, _half_up(ax) - k, contrast)
    return img


def to_uint8(img: np.ndarray) -> np.ndarray:
    """Bytescale: min -> 0, max -> 255, rounded half up (what the original's imsave did to a float
    image); a constant image becomes 0."""
    lo = float(img.min())
    hi = float(img.max())
    if hi <= lo:
        return np.zeros(img.shape, dtype=np.uint8)
    return np.floor((img - lo) * (255.0 / (hi - lo)) + 0.5).clip(0, 255).astype(np.uint8)


@dataclasses.dataclass
class Sample:
    image: np.ndarray          # (H, W) uint8
    label: int
    markers: list              # [(x, y), (x, y)] marker centres (x = column, y = row)
    num_distractors: int       # distractor snakes actually placed
    margin: int                # paddle margin drawn for this image


def generate_sample(params: PathfinderParams, seed: int, split: str, index: int) -> Sample:
    """The image for (seed, split, index): a pure function of its arguments."""
    label = sample_label(seed, split, index)
    rng = random.Random(f"pathfinder/{seed}/{split}/{index}")
    for _attempt in range(1000):
        drawing = _Drawing(params, rng)
        markers = drawing.targets(label)
        if markers is None:
            continue
        placed = drawing.distractors()
        img = render(drawing.scene, params, drawing.margin)
        return Sample(to_uint8(img), label, markers, placed, drawing.margin)
    raise RuntimeError(f"could not draw a Pathfinder image with {params} in 1000 attempts; "
                       "the parameters leave no room for two target contours")


def generate_into(params: PathfinderParams, seed: int, split: str, indices: Sequence[int],
                  out: np.ndarray) -> np.ndarray:
    """Draw the images of `indices` into out[0..len-1]; returns their labels."""
    labels = np.empty(len(indices), dtype=np.int64)
    for j, index in enumerate(indices):
        sample = generate_sample(params, seed, split, int(index))
        out[j] = sample.image
        labels[j] = sample.label
    return labels
