"""How paged-ctl shows things: rich tables for people, YAML/JSON for scripts. No I/O besides printing."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import yaml
from pydantic.alias_generators import to_snake
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from paged_platform.api import AutoscalingTargets, ConditionType, ModelDeployment
from paged_platform.api.status import Decision
from paged_platform.podmetrics import PodMetrics
from paged_platform.sizing import DTYPE_BYTES, ModelShape, Plan, explain_misfit


class Output(StrEnum):
    TABLE = "table"
    YAML = "yaml"
    JSON = "json"


class ManifestOutput(StrEnum):
    """Formats of Kubernetes objects meant to be applied (no table: every field matters)."""

    YAML = "yaml"
    JSON = "json"


def stdout() -> Console:
    return Console(highlight=False, soft_wrap=False)


def stderr() -> Console:
    return Console(stderr=True, highlight=False)


def clean(obj: dict[str, Any]) -> dict[str, Any]:
    """An object as the user wants to read it: without the server's managedFields bookkeeping."""
    meta = {k: v for k, v in obj.get("metadata", {}).items() if k != "managedFields"}
    return {**obj, "metadata": meta}


def dump(data: Any, output: Output) -> str:
    if output is Output.JSON:
        return json.dumps(data, indent=2, default=str)
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)


def as_list(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "List", "items": [clean(i) for i in items]}


class _ManifestDumper(yaml.SafeDumper):
    """Multi-line strings (scripts, the ConfigMap's JSON) as literal blocks, readable as they will run."""


def _str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|" if "\n" in data else None)


_ManifestDumper.add_representer(str, _str)


def dump_manifests(objects: list[dict[str, Any]], output: ManifestOutput) -> str:
    """Objects as ``kubectl apply -f`` reads them: YAML documents each opened by ``---``, or one JSON ``List``."""
    if output is ManifestOutput.JSON:
        return json.dumps(as_list(objects), indent=2) + "\n"
    return yaml.dump_all(
        objects, Dumper=_ManifestDumper, sort_keys=False, default_flow_style=False, explicit_start=True
    )


def age(created: str | None, now: datetime | None = None) -> str:
    """kubectl-style age ("45s", "12m", "5h", "3d") of an RFC 3339 timestamp."""
    if not created:
        return "-"
    then = datetime.fromisoformat(created.replace("Z", "+00:00"))
    seconds = max(0, int(((now or datetime.now(UTC)) - then).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def dash(value: object) -> str:
    return "-" if value is None else str(value)


def pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.0f}%"


def num(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "-"
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.{digits}f}"


def seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.0f}ms" if value < 1 else f"{value:.2f}s"


def ready_reason(md: ModelDeployment) -> str:
    cond = md.status.condition(ConditionType.READY)
    return cond.reason if cond else "-"


def md_table(objects: list[tuple[ModelDeployment, dict[str, Any]]], *, show_namespace: bool) -> Table:
    table = Table(box=box.SIMPLE, pad_edge=False)
    columns = ["NAMESPACE"] if show_namespace else []
    columns += ["NAME", "MODEL", "READY", "DESIRED", "MIN", "MAX", "KV", "STATUS", "AGE"]
    for column in columns:
        table.add_column(column, no_wrap=True)
    for md, raw in objects:
        row = [md.metadata.namespace or "-"] if show_namespace else []
        row += [
            md.metadata.name,
            md.spec.model.resolved_served_name,
            str(md.status.ready_replicas),
            str(md.status.desired_replicas),
            str(md.spec.replicas.min),
            str(md.spec.replicas.max),
            pct(md.status.metrics.kv_cache_usage if md.status.metrics else None),
            ready_reason(md),
            age(raw.get("metadata", {}).get("creationTimestamp")),
        ]
        table.add_row(*row)
    return table


def decisions_table(decisions: list[Decision]) -> Table:
    table = Table(box=box.SIMPLE, pad_edge=False, title="Decisions (newest last)", title_justify="left")
    for column in ("TIME", "KIND", "FROM", "TO", "REASON"):
        table.add_column(column, overflow="fold")
    for d in decisions:
        reason = f"{escape(d.reason)} [dim](dry run)[/dim]" if d.dry_run else escape(d.reason)
        table.add_row(d.time.strftime("%Y-%m-%d %H:%M:%S"), d.kind, d.from_.describe(), d.to.describe(), reason)
    return table


def describe(console: Console, md: ModelDeployment) -> None:
    spec, status = md.spec, md.status
    model = spec.model
    budget, resolved = spec.scheduler_budget, spec.resolved_budgets()
    auto = spec.autoscaling
    image = spec.engine.image or "the operator's engine image (--engine-image)"  # resolved when the operator renders
    lines = [
        f"[bold]Name:[/bold]        {md.metadata.name}",
        f"[bold]Namespace:[/bold]   {md.metadata.namespace or '-'}",
        f"[bold]Model:[/bold]       {escape(model.describe())} (served as {escape(model.resolved_served_name)})",
        f"[bold]Engine:[/bold]      {escape(image)} dtype={spec.engine.dtype} blockSize={spec.engine.block_size}",
        f"[bold]Endpoint:[/bold]    {escape(status.endpoint or '-')}",
        f"[bold]Replicas:[/bold]    {status.ready_replicas} ready, {status.desired_replicas} desired,"
        f" {status.replicas} current (min {spec.replicas.min}, max {spec.replicas.max})",
        f"[bold]Autoscaling:[/bold] {'on' if auto.enabled else 'off'}{' (dry run)' if auto.dry_run else ''}:"
        f" kvCacheUsage<={auto.targets.kv_cache_usage} waitingPerReplica<={auto.targets.waiting_per_replica}"
        f" preemptionRate<={auto.targets.preemption_rate}/s"
        + (f" ttftP95<={auto.targets.ttft_p95_seconds}s" if auto.targets.ttft_p95_seconds else ""),
        f"[bold]Budget:[/bold]      spec maxNumSeqs={spec_budget(budget.max_num_seqs, resolved.max_num_seqs)}"
        f" maxNumBatchedTokens={spec_budget(budget.max_num_batched_tokens, resolved.max_num_batched_tokens)};"
        f" adaptive {'on' if budget.adaptive.enabled else 'off'}"
        + (
            f"; in force maxNumSeqs={status.budget.max_num_seqs}"
            f" maxNumBatchedTokens={status.budget.max_num_batched_tokens}"
            if status.budget
            else ""
        ),
        f"[bold]Observed:[/bold]    generation {dash(status.observed_generation)} of {dash(md.metadata.generation)}",
    ]
    if status.metrics:
        m = status.metrics
        lines.append(
            f"[bold]Metrics:[/bold]     at {m.time:%H:%M:%S} over {m.replicas} replicas: KV {pct(m.kv_cache_usage)},"
            f" waiting {num(m.requests_waiting)}, running {num(m.requests_running)},"
            f" preemptions {num(m.preemption_rate, 2)}/s, prefix hits {pct(m.prefix_cache_hit_rate)},"
            f" TTFT p95 {seconds(m.ttft_p95_seconds)}"
        )
    for line in lines:
        console.print(line)
    conditions = Table(box=box.SIMPLE, pad_edge=False, title="Conditions", title_justify="left")
    for column in ("TYPE", "STATUS", "REASON", "MESSAGE", "SINCE"):
        conditions.add_column(column, overflow="fold")
    for c in status.conditions:
        since = c.last_transition_time.strftime("%Y-%m-%d %H:%M:%S")
        conditions.add_row(c.type, c.status, c.reason, escape(c.message), since)
    console.print(conditions if status.conditions else "[dim]No conditions reported yet.[/dim]")
    console.print(decisions_table(status.decisions) if status.decisions else "[dim]No decisions recorded yet.[/dim]")


def spec_budget(value: int | None, resolved: int) -> str:
    """A budget as the spec gives it: its value, or the engine's default it resolves to when unset."""
    return str(value) if value is not None else f"default ({resolved})"


def budget_table(md: ModelDeployment) -> Table:
    budget, resolved = md.spec.scheduler_budget, md.spec.resolved_budgets()
    adaptive = budget.adaptive
    table = Table(box=box.SIMPLE, pad_edge=False)
    for column in ("BUDGET", "SPEC", "IN FORCE", "ADAPTIVE BOUNDS"):
        table.add_column(column, no_wrap=True)
    in_force = md.status.budget
    bounds_on = adaptive.enabled
    table.add_row(
        "maxNumSeqs",
        spec_budget(budget.max_num_seqs, resolved.max_num_seqs),
        str(in_force.max_num_seqs) if in_force else "-",
        f"{adaptive.max_num_seqs.min}..{adaptive.max_num_seqs.max}" if bounds_on else "off",
    )
    table.add_row(
        "maxNumBatchedTokens",
        spec_budget(budget.max_num_batched_tokens, resolved.max_num_batched_tokens),
        str(in_force.max_num_batched_tokens) if in_force else "-",
        f"{adaptive.max_num_batched_tokens.min}..{adaptive.max_num_batched_tokens.max}" if bounds_on else "off",
    )
    return table


TOP_COLUMNS = ("POD", "KV", "RUNNING", "WAITING", "PREEMPTIONS", "PREFIX HIT", "TTFT P95", "MAX SEQS", "MAX TOKENS")


def top_rows(results: list[tuple[str, PodMetrics | str]]) -> list[dict[str, Any]]:
    """One row per pod: its metrics, or the error that kept them from us."""
    rows = []
    for pod, m in results:
        if isinstance(m, str):
            rows.append({"pod": pod, "error": m})
            continue
        rows.append(
            {
                "pod": pod,
                "kvCacheUsage": m.kv_cache_usage,
                "requestsRunning": m.requests_running,
                "requestsWaiting": m.requests_waiting,
                "preemptions": m.preemptions,
                "prefixCacheHitRate": m.prefix_cache_hit_rate,
                "ttftP95Seconds": m.ttft_p95_seconds,
                "maxNumSeqs": m.max_num_seqs,
                "maxNumBatchedTokens": m.max_num_batched_tokens,
            }
        )
    return rows


def top_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(box=box.SIMPLE, pad_edge=False)
    for column in TOP_COLUMNS:
        table.add_column(column, no_wrap=True)
    for r in rows:
        if "error" in r:
            table.add_row(r["pod"], f"[red]{escape(r['error'])}[/red]", *[""] * (len(TOP_COLUMNS) - 2))
            continue
        table.add_row(
            r["pod"],
            pct(r["kvCacheUsage"]),
            num(r["requestsRunning"]),
            num(r["requestsWaiting"]),
            num(r["preemptions"]),
            pct(r["prefixCacheHitRate"]),
            seconds(r["ttftP95Seconds"]),
            num(r["maxNumSeqs"]),
            num(r["maxNumBatchedTokens"]),
        )
    return table


def explain_data(md: ModelDeployment) -> dict[str, Any]:
    """Why the replica count is what it is: the last scale decision, its signals against the targets, limits."""
    decision = md.status.last_decision("scale")
    limited = md.status.condition(ConditionType.SCALING_LIMITED)
    targets = md.spec.autoscaling.targets
    data: dict[str, Any] = {
        "name": md.metadata.name,
        "autoscaling": {"enabled": md.spec.autoscaling.enabled, "dryRun": md.spec.autoscaling.dry_run},
        "replicas": {"min": md.spec.replicas.min, "max": md.spec.replicas.max, "desired": md.status.desired_replicas},
        "decision": None,
        "scalingLimited": None,
    }
    if decision is not None:
        signals = []
        for name, value in decision.signals.items():
            # Signals named after their target (camelCase or snake_case) are compared with it.
            field = name if name in AutoscalingTargets.model_fields else to_snake(name)
            target = getattr(targets, field) if field in AutoscalingTargets.model_fields else None
            signals.append(
                {"signal": name, "observed": value, "target": target, "ratio": value / target if target else None}
            )
        data["decision"] = {
            "time": decision.time.isoformat(),
            "from": decision.from_.replicas,
            "to": decision.to.replicas,
            "reason": decision.reason,
            "dryRun": decision.dry_run,
            "signals": signals,
        }
    if limited is not None and limited.status == "True":
        data["scalingLimited"] = {"reason": limited.reason, "message": limited.message}
    return data


def explain(console: Console, data: dict[str, Any]) -> None:
    auto = data["autoscaling"]
    reps = data["replicas"]
    state = "off" if not auto["enabled"] else ("on, dry run" if auto["dryRun"] else "on")
    console.print(
        f"[bold]{data['name']}[/bold]: autoscaling {state}; {reps['desired']} desired within"
        f" [{reps['min']}, {reps['max']}]"
    )
    decision = data["decision"]
    if decision is None:
        console.print("No scaling decision recorded yet.")
    else:
        verb = "would scale" if decision["dryRun"] else "scaled"
        console.print(f"At {decision['time']} the operator {verb} {decision['from']} -> {decision['to']} replicas:")
        console.print(f"  {escape(decision['reason'])}")
        if decision["signals"]:
            table = Table(box=box.SIMPLE, pad_edge=False)
            for column in ("SIGNAL", "OBSERVED", "TARGET", "OBSERVED/TARGET"):
                table.add_column(column, no_wrap=True)
            for s in decision["signals"]:
                ratio = s["ratio"]
                shown = "-" if ratio is None else (f"[red]{ratio:.2f}[/red]" if ratio > 1 else f"{ratio:.2f}")
                table.add_row(escape(s["signal"]), num(s["observed"], 3), num(s["target"], 3), shown)
            console.print(table)
    if data["scalingLimited"]:
        limited = data["scalingLimited"]
        console.print(f"[yellow]Scaling limited[/yellow] ({limited['reason']}): {escape(limited['message'])}")


def gib(size: float) -> str:
    return f"{size / 2**30:.1f} GiB"


def gib_gb(size: float) -> str:
    """A size in GiB (how GPUs and quantities are given) and GB (how model sizes are published)."""
    return f"{gib(size)} ({size / 1e9:.1f} GB)"


def plan_data(plan: Plan, shape: ModelShape, source: str, weights_from: str) -> dict[str, Any]:
    """Everything ``paged-ctl plan`` found, for ``-o json/yaml`` and for the table; ``notes`` say where the
    arithmetic is only an upper bound or the context exceeds what the model was trained for."""
    chosen = plan.chosen
    notes = []
    window = shape.sliding_window
    if window is not None and window < plan.context:
        notes.append(
            f"The config has a sliding window of {window} tokens: layers that use it hold at most that many, so the"
            " engine needs less KV cache than this full-attention figure."
        )
    if "vision_config" in shape.config and weights_from.startswith("estimated"):
        notes.append(
            "The estimate counts the language model only, not the vision tower: point at the model folder to count"
            " every tensor of its *.safetensors files."
        )
    longest = shape.max_position_embeddings
    if longest is not None and plan.context > longest:
        notes.append(f"--context {plan.context} exceeds the model's max_position_embeddings ({longest}).")
    return {
        "model": {
            "source": source,
            "layers": shape.layers,
            "attentionHeads": shape.heads,
            "kvHeads": shape.kv_heads,
            "headDim": shape.head_dim,
            "parameters": plan.parameters,
            "weightsFrom": weights_from,
        },
        "dtype": plan.dtype,
        "kvDtype": plan.kv_dtype,
        "context": plan.context,
        "concurrency": plan.concurrency,
        "kvBytesPerToken": plan.kv_bytes_per_token,
        "kvBytesPerRequest": plan.kv_bytes_per_request,
        "weightBytes": plan.weight_bytes,
        "gpuMemoryBytes": plan.gpu_memory_bytes,
        "memoryFraction": plan.memory_fraction,
        "tried": [
            {
                "tensorParallel": t.tp,
                "weightBytesPerGpu": t.weight_bytes_per_gpu,
                "freeBytesPerGpu": t.free_bytes_per_gpu,
                "kvCacheBytesPerGpu": t.kv_budget_bytes_per_gpu,
                "kvBytesPerRequestPerGpu": t.kv_bytes_per_request_per_gpu,
                "requests": t.requests,
                "replicas": t.replicas,
                "gpus": t.gpus,
            }
            for t in plan.tried
        ],
        "fits": chosen is not None,
        "tensorParallel": chosen.tp if chosen else None,
        "requestsPerReplica": chosen.requests if chosen else None,
        "replicas": chosen.replicas if chosen else None,
        "gpus": chosen.gpus if chosen else None,
        "explanation": None if chosen else explain_misfit(plan),
        "notes": notes,
    }


def plan_view(console: Console, data: dict[str, Any]) -> None:
    model = data["model"]
    per_elem = DTYPE_BYTES[data["kvDtype"]]
    console.print(
        f"[bold]{escape(model['source'])}[/bold]: {model['layers']} layers, {model['attentionHeads']} attention"
        f" heads, {model['kvHeads']} KV heads, head dim {model['headDim']}; {data['dtype']} weights,"
        f" {data['kvDtype']} KV cache"
    )
    table = Table(box=box.SIMPLE, pad_edge=False)
    for column in ("QUANTITY", "VALUE", "HOW"):
        table.add_column(column, no_wrap=column != "HOW", overflow="fold")
    table.add_row(
        "KV per token",
        f"{data['kvBytesPerToken']:,} B",
        f"2 × {model['layers']} layers × {model['kvHeads']} KV heads × {model['headDim']} head dim × {per_elem} B",
    )
    table.add_row("KV per request", gib_gb(data["kvBytesPerRequest"]), f"× {data['context']:,} tokens of context")
    table.add_row("Parameters", f"{data['model']['parameters'] / 1e9:.2f} billion", escape(model["weightsFrom"]))
    table.add_row("Weights", gib_gb(data["weightBytes"]), f"in {data['dtype']}")
    if data["fits"]:
        (fit,) = [t for t in data["tried"] if t["tensorParallel"] == data["tensorParallel"]]
        table.add_row("Tensor parallel", str(data["tensorParallel"]), "the size that needs the fewest GPUs (below)")
        table.add_row(
            "KV cache per GPU",
            gib(fit["kvCacheBytesPerGpu"]),
            f"{data['memoryFraction']:g} × ({gib(data['gpuMemoryBytes'])} − {gib(fit['weightBytesPerGpu'])} weights)"
            " (the rest: activations, runtime)",
        )
        table.add_row(
            "Requests per replica",
            str(data["requestsPerReplica"]),
            f"{gib(fit['kvCacheBytesPerGpu'])} / {gib(fit['kvBytesPerRequestPerGpu'])} per request per GPU",
        )
        table.add_row(
            "Replicas", str(data["replicas"]), f"⌈{data['concurrency']} concurrent / {data['requestsPerReplica']}⌉"
        )
        table.add_row("GPUs", str(data["gpus"]), f"{data['tensorParallel']} per replica × {data['replicas']}")
    console.print(table)
    tried = Table(box=box.SIMPLE, pad_edge=False, title="Tensor-parallel sizes tried", title_justify="left")
    for column in ("TP", "WEIGHTS/GPU", "KV CACHE/GPU", "KV/REQUEST/GPU", "REQUESTS", "REPLICAS", "GPUS"):
        tried.add_column(column, no_wrap=True)
    for t in data["tried"]:
        cells = [
            str(t["tensorParallel"]),
            gib(t["weightBytesPerGpu"]),
            gib(t["kvCacheBytesPerGpu"]) if t["freeBytesPerGpu"] > 0 else "[red]no room[/red]",
            gib(t["kvBytesPerRequestPerGpu"]),
            str(t["requests"]),
            dash(t["replicas"]),
            dash(t["gpus"]),
        ]
        chosen = t["tensorParallel"] == data["tensorParallel"]
        tried.add_row(*(f"[bold]{c}[/bold]" if chosen else c for c in cells))
    console.print(tried)
    if data["explanation"]:
        console.print(f"[red]Does not fit.[/red] {escape(data['explanation'])}")
    for note in data["notes"]:
        console.print(f"[yellow]Note:[/yellow] {escape(note)}")
