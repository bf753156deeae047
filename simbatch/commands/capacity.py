"""``simbatch capacity``: the highest rate each configuration serves within SLOs, and what a target rate costs."""

from __future__ import annotations

from simbatch.commands.common import (add_executor_arguments, add_scenario_arguments, comma_list, load,
                                      make_args_executor, print_notes)
from simbatch.errors import SimbatchError

NAME = "capacity"
HELP = "find the highest arrival rate each configuration serves within SLOs, and the cheapest for a target"
ALL_POLICIES = "static,dynamic,continuous,chunked_prefill"


def add_arguments(p) -> None:
    add_scenario_arguments(p)
    p.add_argument("--slo", action="append", default=[], metavar="KEY=MS",
                   help="a target in ms, repeatable: <metric>_<stat>_ms (metric ttft, tpot, itl, e2el, queue; "
                        "stat p50, p90, p99, mean), e.g. ttft_p99_ms=500; or per-request ttft_ms, tpot_ms, "
                        "e2el_ms with --attainment")
    p.add_argument("--attainment", type=float, help="fraction of requests that must meet the per-request targets")
    p.add_argument("--policies", default=ALL_POLICIES, help="comma-separated policy kinds (default: all four)")
    p.add_argument("--hardware", help="comma-separated GPU presets (default: the scenario's)")
    p.add_argument("--model", help="comma-separated model presets (default: the scenario's)")
    p.add_argument("--tp", help="comma-separated tensor-parallel degrees (default: the scenario's)")
    p.add_argument("--pp", help="comma-separated pipeline stages per replica (default: the scenario's)")
    p.add_argument("--replicas", help="comma-separated replica counts (default: the scenario's)")
    p.add_argument("--splits", help="comma-separated layouts: colocated, or P:D for prefill/decode "
                                    "disaggregation with P prefill and D decode replicas per unit, e.g. "
                                    "colocated,1:1,1:3; a side may name its replicas' layout, e.g. "
                                    "1tp2:2tp1pp2 (default: colocated; link and pool settings from the "
                                    "scenario's disaggregation section, else NVLink; a side without its own "
                                    "tp/pp takes its pool's in the scenario, else --tp/--pp)")
    p.add_argument("--seeds", help="comma-separated seeds; a rate holds only if it holds for all "
                                   "(default: 3 for a random workload, 1 for a fixed trace)")
    p.add_argument("--tolerance", type=float, default=0.05,
                   help="stop bisecting when fail/hold rate <= 1 + this (default 0.05)")
    p.add_argument("--target-rate", type=float, metavar="REQ_S",
                   help="also find the fewest replicas (and $/hour) that serve this rate")
    p.add_argument("--price", action="append", default=[], metavar="GPU=USD",
                   help="override a GPU's $/GPU-hour, e.g. a100-80gb=1.8 (repeatable)")
    p.add_argument("--prices", metavar="FILE", help="YAML mapping of GPU name to $/GPU-hour")
    add_executor_arguments(p)


def run(args) -> None:
    from simbatch.capacity import (
        capacity_table,
        default_seeds,
        expand,
        find_capacity,
        format_table,
        parse_slos,
        price_table,
        write_capacity,
    )

    scenario = load(args)
    slo = parse_slos(args.slo, args.attainment, scenario.slo.as_dict())
    hardware = _names(args.hardware, "--hardware", "hardware")
    models = _names(args.model, "--model", "model")
    candidates = expand(scenario, _policies(args.policies), hardware, models,
                        _ints(args.tp, "--tp"), _ints(args.replicas, "--replicas"), _splits(args.splits),
                        _ints(args.pp, "--pp"))
    seeds = _ints(args.seeds, "--seeds", minimum=0) or default_seeds(scenario)
    prices = price_table(args.price, args.prices, known=_gpu_names(scenario, hardware))
    print(f"{scenario.name}: SLO {slo.describe()}; seeds {','.join(map(str, seeds))}; "
          f"{len(candidates)} candidate(s)", flush=True)
    executor = make_args_executor(args)
    bar = _SearchBar()
    try:
        result = find_capacity(scenario, slo, candidates, seeds=seeds, tolerance=args.tolerance,
                               target_rate=args.target_rate, executor=executor,
                               log=bar.log, bar=bar.make if bar.live else None)
    finally:
        executor.close()
    table = capacity_table(result, prices)
    _print_explanations(result, table)
    print(format_table(table, with_target=bool(args.target_rate)))
    if args.out:
        write_capacity(args.out, table, result.probes)
        print(f"wrote {args.out}/capacity.csv and probes.csv ({len(result.probes)} runs)")


class _SearchBar:
    """One live progress line on stderr for the whole search (runs done, runs under way,
    elapsed), on a terminal only, with the log lines (one per search as it ends) printed
    above it: elsewhere the log lines are the record. No total and no ETA: each search
    decides its next probe from its last answer, so the runs still to come are not known
    (an ETA over the runs asked so far read 2 s through most of a 22 s search)."""

    def __init__(self):
        import sys

        self.live = sys.stderr.isatty()
        self.progress = None

    def make(self, n: int):
        """The bar, for ``n`` runs so far (``find_capacity`` grows it and closes it)."""
        from simbatch.sweep.progress import Progress

        self.progress = Progress(n, open_ended=True)
        return self.progress

    def log(self, line: str) -> None:
        """Print ``line`` on stdout, blanking the bar's line first and redrawing the bar after."""
        bar = self.progress
        if bar is not None and bar.live:
            bar.stream.write("\r" + " " * bar.drawn + "\r")
            bar.stream.flush()
        print(line, flush=True)
        if bar is not None and bar.live:
            bar.update(0)


def _print_explanations(result, table) -> None:
    from simbatch.capacity import explain_boundary, explain_sizing
    from simbatch.capacity.report import explain_per_gpu
    from simbatch.report.table import fmt_num

    rates = result.seed_rates
    per_seed = f" (mean over seeds: {', '.join(fmt_num(r) for r in rates.values())})" if len(rates) > 1 else ""
    print(f"k = 1 is the workload as given: {fmt_num(result.base_rate)} req/s{per_seed}; "
          f"{len(result.probes)} runs in all (every one in probes.csv)")
    for cand, why in result.skipped.items():
        print_notes([f"{cand.label(result.gpu_names[cand])}: {why}"], "skipped")
    for b in result.boundaries:
        print(explain_boundary(b, result.base_rate, result.gpu_names[b.candidate]))
    alone = {b.candidate: b.lo * result.base_rate for b in result.boundaries if b.lo}  # one replica's rate
    for s in result.sizing.values():
        one = s.group.with_replicas(1)
        print(explain_sizing(s, result.target_rate, result.gpu_names[one]))
        line = explain_per_gpu(s, result.target_rate, alone.get(one, 0))
        if line:
            print(line)
    if result.target_rate and len(table) and table["target_usd_per_hour"].notna().any():
        best = table.iloc[0]
        unit = "replica(s)" if best.get("split", "colocated") == "colocated" else f"unit(s) of {best['split']}"
        layout = f" {best['layout']}" if best["layout"] else ""
        print(f"cheapest for {fmt_num(result.target_rate)} req/s: {best['policy']} on {best['hardware']}"
              f"{layout} x {int(best['target_replicas'])} {unit} = {int(best['target_gpus'])} GPU(s), "
              f"${best['target_usd_per_hour']:.2f}/hour at ${best['usd_per_gpu_hour']:.2f}/GPU-hour "
              f"(preset prices are indicative; see --price)")


def _policies(text: str) -> list[str]:
    from simbatch.policies import policy_class

    kinds = list(dict.fromkeys(comma_list(text, "--policies") or []))
    if not kinds:
        raise SimbatchError("--policies", f"expected comma-separated kinds, e.g. {ALL_POLICIES}")
    for k in kinds:
        policy_class({"kind": k}, "--policies")
    return kinds


def _names(text: str | None, flag: str, what: str) -> list[str] | None:
    """Preset names, checked now (before any run); None when the flag is absent."""
    from simbatch.catalog.hardware import get_gpu
    from simbatch.catalog.models import get_model

    names = list(dict.fromkeys(comma_list(text, flag) or []))
    get = get_gpu if what == "hardware" else get_model
    return [get(n, flag).name for n in names] or None


def _splits(text: str | None) -> list | None:
    """``colocated,1:3,1tp2:2tp1pp2`` -> [None, (1, 3), (PoolShape(1, 2), PoolShape(2, 1, 2))];
    bad items are one-line errors naming ``--splits``."""
    out: list = []
    for item in comma_list(text, "--splits") or []:
        if item == "colocated":
            out.append(None)
            continue
        sides = [_pool_shape(side) for side in item.split(":")]
        if len(sides) != 2 or None in sides:
            raise SimbatchError("--splits", f"expected colocated or P:D with positive integers, each optionally "
                                            f"with its layout (e.g. 1tp2:2tp1pp2), got {item!r}")
        out.append(tuple(sides) if any(s.tp or s.pp for s in sides) else (sides[0].count, sides[1].count))
    return out or None


def _pool_shape(text: str):
    """``2tp1pp2`` -> PoolShape(2, 1, 2); None unless every number is a positive integer."""
    import re

    from simbatch.capacity.candidates import PoolShape

    m = re.fullmatch(r"(\d+)(?:tp(\d+))?(?:pp(\d+))?", text.strip())
    if not m or any(v is not None and int(v) < 1 for v in m.groups()):
        return None
    count, tp, pp = (int(v) if v is not None else None for v in m.groups())
    return PoolShape(count, tp, pp)


def _ints(text: str | None, flag: str, minimum: int = 1) -> list[int] | None:
    values = []
    for t in comma_list(text, flag) or []:
        try:
            values.append(int(t))
        except ValueError:
            raise SimbatchError(f"{flag} {text}", f"expected comma-separated integers, got {t!r}") from None
        if values[-1] < minimum:
            raise SimbatchError(f"{flag} {text}", f"expected integers >= {minimum}, got {t}")
    return list(dict.fromkeys(values)) or None


def _gpu_names(scenario, hardware: list[str] | None) -> set[str]:
    return set(hardware or [scenario.gpu.name])
