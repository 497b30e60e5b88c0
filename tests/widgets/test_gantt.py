"""plots.gantt draws any list of trace.Event: a measured-looking trace of 8
ranks (compute and communication, built by hand here) and a simulated plan."""
import ast
import inspect

import matplotlib

matplotlib.use("Agg")   # headless; the library itself never picks a backend

import pytest
from matplotlib.figure import Figure

from threeaxes import plots
from threeaxes.pipeline import interleaved_1f1b, one_f_one_b, simulate
from threeaxes.plots import gantt
from threeaxes.trace import Event, Trace

T0 = 1_700_000_000.0     # time.time() seconds, as a real launch records them


def measured_trace():
    """8 ranks as dp=2 x tp=2 x pp=2 (tp fastest): per rank 2 forwards and 2
    backwards, a tp all-reduce after each, a pp send, then a dp all-reduce
    and the optimizer step. Returns (events, number of comm events)."""
    events, n_comm = [], 0
    for r in range(8):
        stage, t = r // 4, T0 + 0.002 * r
        for op, length in (("forward", 0.010), ("backward", 0.020)):
            for k in range(2):
                events.append(Event(r, "compute", op, t, t + length, module=f"stage {stage}",
                                    stage=stage, microbatch=k))
                t += length
                events.append(Event(r, "comm", "all_reduce", t, t + 0.003, axis="tp",
                                    group=(r - r % 2, r - r % 2 + 1), bytes=4096))
                t += 0.003
        events.append(Event(r, "comm", "send", t, t + 0.001, axis="pp", group=(r % 4, r % 4 + 4),
                            bytes=2048, peer=(r + 4) % 8))
        events.append(Event(r, "comm", "all_reduce", t, t + 0.008, axis="dp", bytes=1 << 20,
                            group=(r % 2 + 4 * (r // 4), r % 2 + 4 * (r // 4) + 2)))
        events.append(Event(r, "compute", "optimizer", t + 0.008, t + 0.012, module="model"))
        n_comm += 2 * 2 + 2
    return events, n_comm


def boxes(fig, lane):
    """(facecolours, number of boxes) of the collections gantt tagged `lane`."""
    colls = [c for c in fig.axes[0].collections if c.get_gid() == lane]
    return ({tuple(c.get_facecolor()[0]) for c in colls},
            sum(len(c.get_paths()) for c in colls))


def test_measured_trace_of_8_ranks():
    events, n_comm = measured_trace()
    fig = gantt(events, title="dp=2 tp=2 pp=2, one step", time_unit="ms")
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    # one row per rank, rank 0 on top (the y axis runs downwards)
    assert list(ax.get_yticks()) == list(range(8))
    assert [t.get_text() for t in ax.get_yticklabels()] == [f"rank {r}" for r in range(8)]
    bottom, top = ax.get_ylim()
    assert top < 0 < 7 < bottom
    assert ax.get_title() == "dp=2 tp=2 pp=2, one step"
    # every event is one box; comm and compute never share a colour
    comm_colors, comm_boxes = boxes(fig, "comm")
    compute_colors, compute_boxes = boxes(fig, "compute")
    assert (comm_boxes, compute_boxes) == (n_comm, len(events) - n_comm)
    assert len(comm_colors) == 3 and not comm_colors & compute_colors     # dp, tp, pp
    # shifted to start at 0, in milliseconds: rank 7 starts at 14 ms and its
    # optimizer ends 2 (10 + 3) + 2 (20 + 3) + 8 + 4 = 84 ms later
    assert ax.get_xlim() == pytest.approx((0, 98), abs=1e-3)
    assert "ms" in ax.get_xlabel()
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["forward", "backward", "optimizer", "dp comm", "tp comm", "pp comm"]


def test_comm_is_drawn_thinner_in_the_lower_part_of_the_row():
    fig = gantt(measured_trace()[0])
    ax = fig.axes[0]
    extents = {}
    for c in ax.collections:
        for path in c.get_paths():
            ys = path.vertices[:, 1]
            extents.setdefault(c.get_gid(), []).append((ys.min() % 1, ys.max() - ys.min()))
    comm_top = min(y for y, _ in extents["comm"])
    comm_height = max(h for _, h in extents["comm"])
    compute_height = min(h for _, h in extents["compute"])
    assert comm_height < compute_height
    assert 0 < comm_top < 0.5      # below the row's centre: the row is drawn top-down


def test_labels_only_where_they_fit():
    fig = gantt(simulate(one_f_one_b(4, 8)).events, time_unit="forward = 1")
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "0B0" in texts and "3B7" in texts            # a backward box has room for its label
    assert len(texts) <= 2 * 4 * 8 and set(texts) <= {f"{s}{k}{i}" for s in range(4)
                                                       for k in "FB" for i in range(8)}
    assert fig.axes[0].get_xlabel() == "time (forward = 1)"
    # 8 ranks of 512 short boxes each: far too narrow for any label
    crowded = gantt(simulate(interleaved_1f1b(8, 64, 4)).events)
    assert len(crowded.axes[0].texts) == 0 and len(crowded.axes[0].get_yticks()) == 8


def test_a_simulated_plan_draws_like_a_measured_trace():
    sim = simulate(interleaved_1f1b(2, 4, 2), forward_cost=1, backward_cost=2)
    fig = gantt(sim.events)       # rank -> events, as simulate returns them
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["rank 0", "rank 1"]
    assert boxes(fig, "comm")[1] == 0
    colors, n = boxes(fig, "compute")
    assert n == 2 * 2 * 4 * 2 and len(colors) == 4      # F and B, two chunks each
    assert ax.get_xlim() == pytest.approx((0, float(sim.makespan)))
    assert "2 ranks" in ax.get_title()
    # a Trace, a flat list, and the mapping all draw the same boxes
    flat = [e for r in sim.events for e in sim.events[r]]
    assert boxes(gantt(Trace(flat)), "compute") == boxes(gantt(flat), "compute") == (colors, n)


def test_draws_on_a_given_axes_without_pyplot():
    fig = Figure()
    ax = fig.subplots()
    assert gantt(measured_trace()[0], ax=ax) is fig
    imports = [n for n in ast.walk(ast.parse(inspect.getsource(plots)))
               if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert not any("pyplot" in ast.unparse(n) for n in imports)


def test_bad_input_says_what_to_pass():
    with pytest.raises(ValueError, match=r"no events.*simulate\(plan\)\.events"):
        gantt([])
    with pytest.raises(TypeError, match=r"item 1 is a dict, not an Event.*threeaxes\.trace\.Event"):
        gantt([Event(0, "compute", "forward", 0, 1), {"rank": 0}])
    with pytest.raises(TypeError, match="gantt got int; pass a list of threeaxes.trace.Event"):
        gantt(3)
    with pytest.raises(ValueError, match="ends before it starts"):
        gantt([Event(0, "compute", "forward", 2, 1)])



def test_measured_vs_predicted_draws_a_solid_and_a_hatched_stack_per_row():
    terms = {"params": 2e3, "grads": 1e3, "optimizer": 4e3}
    fig = plots.draw_measured_vs_predicted([("a", terms, terms), ("b", terms, {**terms, "grads": 0.0})])
    bars = [p for p in fig.axes[0].patches if p.get_height() > 0]
    solid = [p for p in bars if not p.get_hatch()]
    hatched = [p for p in bars if p.get_hatch()]
    assert len(solid) == 6 and len(hatched) == 5          # b's predicted stack has no gradient bar
    assert sum(p.get_height() for p in solid) == pytest.approx(2 * 7.0)   # kB
    assert max(p.get_y() + p.get_height() for p in hatched) == pytest.approx(7.0)


def test_labels_of_collectives_in_flight_together_do_not_overprint():
    # three all-reduces of one rank overlapping in time (started together, finishing apart)
    events = [Event(0, "compute", "backward", 0.0, 10.0, module="blocks.0")]
    events += [Event(0, "comm", "all_reduce", 1.0 + 0.1 * i, 9.0 + 0.1 * i, axis="dp", group=(0, 1))
               for i in range(3)]
    texts = [t for t in gantt(events).axes[0].texts if t.get_text() == "all_reduce dp"]
    assert len(texts) == 1
