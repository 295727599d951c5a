"""paged-ctl: the admin CLI for ModelDeployments (typer). Commands parse options, call ``kube``, print via ``render``.

User mistakes and API refusals print one red line (plus field errors) on stderr and exit non-zero
(see ``kube.ExitCode``); a traceback means a bug in paged-ctl.
"""

from __future__ import annotations

import asyncio
import functools
import sys
from collections.abc import Callable, Coroutine
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.markup import escape

from paged_platform import sizing
from paged_platform.api import ModelDeployment, parse_quantity
from paged_platform.api.spec import ReplicasSpec, SchedulerBudget
from paged_platform.checkpoint_meta import Checkpoint, CheckpointError, load_checkpoint
from paged_platform.crd import crd_yaml
from paged_platform.ctl import render, template
from paged_platform.ctl.render import ManifestOutput, Output
from paged_platform.kube import ExitCode, Kube, KubeError, KubeTarget, connect
from paged_platform.manifests import ManifestError, ManifestValidationError, field_errors, load_model_deployments
from paged_platform.podmetrics import PodMetrics, parse_pod_metrics
from paged_platform.prometheus_text import MetricsError

app = typer.Typer(
    name="paged-ctl",
    help="Manage paged ModelDeployments: apply, inspect, scale, tune budgets, watch live metrics.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

NamespaceOpt = Annotated[str | None, typer.Option("--namespace", "-n", help="Namespace (default: the context's).")]
ContextOpt = Annotated[str | None, typer.Option("--context", help="Kubeconfig context (default: the current one).")]
KubeconfigOpt = Annotated[
    str | None, typer.Option("--kubeconfig", help="Kubeconfig file (default: $KUBECONFIG, then ~/.kube/config).")
]
OutputOpt = Annotated[Output, typer.Option("--output", "-o", help="Output format.")]
NameArg = Annotated[str, typer.Argument(help="ModelDeployment name.")]


class DryRun(StrEnum):
    NONE = "none"
    CLIENT = "client"
    SERVER = "server"


class UsageError(KubeError):
    """A bad option or input detected by paged-ctl itself."""


def fail(message: str, code: int = ExitCode.ERROR, details: list[str] | None = None) -> typer.Exit:
    console = render.stderr()
    console.print(f"[red]error:[/red] {escape(message)}", soft_wrap=True)
    for line in details or []:
        console.print(f"  {line}", markup=False, soft_wrap=True)
    return typer.Exit(int(code))


def run(body: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async command body, turning expected failures into one-line errors and exit codes."""

    @functools.wraps(body)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            asyncio.run(body(*args, **kwargs))
        except ManifestValidationError as exc:
            raise fail(f"{exc.where} is invalid:", details=[str(e) for e in exc.errors]) from None
        except ManifestError as exc:
            raise fail(str(exc)) from None
        except KubeError as exc:
            raise fail(str(exc), exc.exit_code) from None

    return wrapper


def target(namespace: str | None, context: str | None, kubeconfig: str | None) -> KubeTarget:
    return KubeTarget(kubeconfig=kubeconfig, context=context, namespace=namespace)


def parse(raw: dict[str, Any]) -> ModelDeployment:
    try:
        return ModelDeployment.from_wire(raw)
    except ValidationError as exc:
        name = raw.get("metadata", {}).get("name", "?")
        errors = "; ".join(str(e) for e in field_errors(exc))
        raise KubeError(f"modeldeployment {name!r} does not match this paged-ctl's API types: {errors}") from None


def emit(data: Any, output: Output) -> None:
    typer.echo(render.dump(data, output), nl=False)


def read_model_deployments(filename: str, namespace: str | None) -> list[tuple[dict[str, Any], ModelDeployment]]:
    """The ModelDeployments of a file ('-': stdin), validated, each as written and as parsed; refused when one
    names a namespace other than ``-n``."""
    if filename == "-":
        text, source = sys.stdin.read(), "<stdin>"
    else:
        path = Path(filename)
        if not path.is_file():
            raise UsageError(f"file {filename} not found")
        try:
            text, source = path.read_text(), filename
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read {filename}: {exc}") from None
    docs = load_model_deployments(text, source)
    for _, md in docs:
        if namespace and md.metadata.namespace and md.metadata.namespace != namespace:
            raise UsageError(
                f"{md.metadata.name}: the namespace in the file ({md.metadata.namespace}) does not match -n {namespace}"
            )
    return docs


@app.command()
@run
async def apply(
    filename: Annotated[str, typer.Option("--filename", "-f", help="YAML file with ModelDeployments ('-' for stdin).")],
    dry_run: Annotated[
        DryRun,
        typer.Option(
            "--dry-run", help="client: validate only, no cluster; server: the server validates, stores nothing."
        ),
    ] = DryRun.NONE,
    namespace: NamespaceOpt = None,
    context: ContextOpt = None,
    kubeconfig: KubeconfigOpt = None,
) -> None:
    """Validate ModelDeployments against the schema, then server-side apply them (field manager paged-ctl)."""
    docs = read_model_deployments(filename, namespace)
    console = render.stdout()
    if dry_run is DryRun.CLIENT:
        for _, md in docs:
            console.print(f"modeldeployment.paged.dev/{md.metadata.name} valid (client dry run)")
        return
    async with connect(target(namespace, context, kubeconfig)) as kube:
        for raw, md in docs:
            await kube.apply(raw, dry_run=dry_run is DryRun.SERVER)
            suffix = " (server dry run)" if dry_run is DryRun.SERVER else ""
            ns = md.metadata.namespace or kube.namespace
            console.print(f"modeldeployment.paged.dev/{md.metadata.name} applied in namespace {ns}{suffix}")


@app.command("render")
@run
async def render_children(
    filename: Annotated[str, typer.Argument(metavar="FILE", help="YAML file with ModelDeployments ('-' for stdin).")],
    output: Annotated[ManifestOutput, typer.Option("--output", "-o", help="Output format.")] = ManifestOutput.YAML,
    namespace: Annotated[
        str | None, typer.Option("--namespace", "-n", help="Namespace of documents that name none (default: default).")
    ] = None,
    router_cluster_role: Annotated[
        str | None,
        typer.Option(
            "--router-cluster-role", help="ClusterRole the router's RoleBinding names (default: the chart's)."
        ),
    ] = None,
    engine_image: Annotated[
        str | None,
        typer.Option("--engine-image", help="The operator's --engine-image (default: this release's engine image)."),
    ] = None,
    router_image: Annotated[
        str | None,
        typer.Option("--router-image", help="The operator's --router-image (default: this release's operator image)."),
    ] = None,
    operator_namespace: Annotated[
        str | None,
        typer.Option(
            "--operator-namespace",
            help="The operator's namespace, whose pods spec.networkPolicy admits (default: none, no such rule).",
        ),
    ] = None,
    operator_pod_label: Annotated[
        list[str] | None,
        typer.Option("--operator-pod-label", metavar="KEY=VALUE", help="A label of the operator's pods (repeatable)."),
    ] = None,
    prometheus_namespace_label: Annotated[
        list[str] | None,
        typer.Option(
            "--prometheus-namespace-label", metavar="KEY=VALUE", help="A label of Prometheus' namespaces (repeatable)."
        ),
    ] = None,
    prometheus_pod_label: Annotated[
        list[str] | None,
        typer.Option(
            "--prometheus-pod-label", metavar="KEY=VALUE", help="A label of the Prometheus pods (repeatable)."
        ),
    ] = None,
) -> None:
    """Print the objects the operator would create for each ModelDeployment in FILE (no cluster, like helm template).

    Built by the operator's own code, in the order it applies them; the budgets are those a new object starts with.
    The options are the operator's flags that change what it renders (the chart sets them from its values).
    Placeholders stand for what only a cluster gives: the owner uid (<assigned-by-the-api-server>)
    and the admin token in the Secret (the operator derives it from its key and the uid).
    The engine Deployment has no spec.replicas: the operator sets the count apart (replicas.min at first).
    """
    docs = read_model_deployments(filename, namespace)
    flags = template.OperatorFlags(
        router_cluster_role=router_cluster_role,
        engine_image=engine_image,
        router_image=router_image,
        operator_namespace=operator_namespace,
        operator_pod_labels=tuple(operator_pod_label or ()),
        prometheus_namespace_labels=tuple(prometheus_namespace_label or ()),
        prometheus_pod_labels=tuple(prometheus_pod_label or ()),
    )
    objects: list[dict[str, Any]] = []
    try:
        for _, md in docs:
            objects += template.operator_children(template.with_namespace(md, namespace or "default"), flags)
    except template.OperatorMissing as exc:
        raise KubeError(str(exc)) from None
    except template.BadFlag as exc:
        raise UsageError(str(exc)) from None
    typer.echo(render.dump_manifests(objects, output), nl=False)
    render.stderr().print(
        f"note: the owner uid ({template.UID_PLACEHOLDER}) and the admin token are placeholders (see --help)",
        markup=False,
    )


async def _get(kube: Kube, name: str | None, all_namespaces: bool, output: Output) -> None:
    if name:
        raws = [await kube.get(name)]
    else:
        raws = await kube.list_objects(all_namespaces=all_namespaces)
    if output is not Output.TABLE:
        emit(render.clean(raws[0]) if name else render.as_list(raws), output)
        return
    if not raws:
        where = "any namespace" if all_namespaces else f"namespace {kube.namespace}"
        render.stderr().print(f"No ModelDeployments found in {where}.")
        return
    render.stdout().print(render.md_table([(parse(r), r) for r in raws], show_namespace=all_namespaces))


@app.command()
@run
async def get(
    name: Annotated[str | None, typer.Argument(help="ModelDeployment name; omit to list.")] = None,
    all_namespaces: Annotated[bool, typer.Option("--all-namespaces", "-A", help="List across namespaces.")] = False,
    output: OutputOpt = Output.TABLE,
    namespace: NamespaceOpt = None,
    context: ContextOpt = None,
    kubeconfig: KubeconfigOpt = None,
) -> None:
    """Show one ModelDeployment, or list them."""
    async with connect(target(namespace, context, kubeconfig)) as kube:
        await _get(kube, name, all_namespaces, output)


@app.command("list")
@run
async def list_(
    all_namespaces: Annotated[bool, typer.Option("--all-namespaces", "-A", help="List across namespaces.")] = False,
    output: OutputOpt = Output.TABLE,
    namespace: NamespaceOpt = None,
    context: ContextOpt = None,
    kubeconfig: KubeconfigOpt = None,
) -> None:
    """List ModelDeployments."""
    async with connect(target(namespace, context, kubeconfig)) as kube:
        await _get(kube, None, all_namespaces, output)


@app.command()
@run
async def describe(
    name: NameArg,
    output: OutputOpt = Output.TABLE,
    namespace: NamespaceOpt = None,
    context: ContextOpt = None,
    kubeconfig: KubeconfigOpt = None,
) -> None:
    """Spec summary, status, conditions and the recent scaling and budget decisions."""
    async with connect(target(namespace, context, kubeconfig)) as kube:
        raw = await kube.get(name)
    if output is not Output.TABLE:
        emit(render.clean(raw), output)
        return
    render.describe(render.stdout(), parse(raw))


@app.command()
@run
async def scale(
    name: NameArg,
    min_: Annotated[int | None, typer.Option("--min", help="New spec.replicas.min.")] = None,
    max_: Annotated[int | None, typer.Option("--max", help="New spec.replicas.max.")] = None,
    namespace: NamespaceOpt = None,
    context: ContextOpt = None,
    kubeconfig: KubeconfigOpt = None,
) -> None:
    """Set the replica bounds (autoscaling moves inside them; without it the operator runs --min)."""
    if min_ is None and max_ is None:
        raise UsageError("give --min, --max or both")
    async with connect(target(namespace, context, kubeconfig)) as kube:
        md = parse(await kube.get(name))
        current = md.spec.replicas
        patch = {"min": current.min if min_ is None else min_, "max": current.max if max_ is None else max_}
        try:
            ReplicasSpec.model_validate(patch)
        except ValidationError as exc:
            raise UsageError("; ".join(f"replicas.{e}" if e.path else str(e) for e in field_errors(exc))) from None
        await kube.patch_spec(name, {"replicas": patch})
    render.stdout().print(
        f"modeldeployment.paged.dev/{name} replicas: min {current.min} -> {patch['min']},"
        f" max {current.max} -> {patch['max']}"
    )


@app.command()
@run
async def budget(
    name: NameArg,
    max_num_seqs: Annotated[int | None, typer.Option("--max-num-seqs", help="New maxNumSeqs.")] = None,
    max_batched_tokens: Annotated[
        int | None, typer.Option("--max-batched-tokens", help="New maxNumBatchedTokens.")
    ] = None,
    output: OutputOpt = Output.TABLE,
    namespace: NamespaceOpt = None,
    context: ContextOpt = None,
    kubeconfig: KubeconfigOpt = None,
) -> None:
    """Show the scheduler budget, or change it (spec.schedulerBudget; the operator pushes it to the replicas)."""
    async with connect(target(namespace, context, kubeconfig)) as kube:
        md = parse(await kube.get(name))
        if max_num_seqs is not None or max_batched_tokens is not None:
            wire = md.spec.scheduler_budget.to_wire()
            changes = {}
            if max_num_seqs is not None:
                changes["maxNumSeqs"] = max_num_seqs
            if max_batched_tokens is not None:
                changes["maxNumBatchedTokens"] = max_batched_tokens
            try:
                SchedulerBudget.model_validate({**wire, **changes})
            except ValidationError as exc:
                errors = [f"schedulerBudget.{e}" if e.path else str(e) for e in field_errors(exc)]
                raise UsageError("; ".join(errors)) from None
            md = parse(await kube.patch_spec(name, {"schedulerBudget": changes}))
    if output is not Output.TABLE:
        budget = md.spec.scheduler_budget.to_wire()
        emit({"spec": budget, "inForce": md.status.budget.to_wire() if md.status.budget else None}, output)
        return
    render.stdout().print(render.budget_table(md))


def metrics_port(pod: dict[str, Any], fallback: int) -> int:
    """The engine's HTTP port: the container port named ``http``, else the first declared one, else ``fallback``."""
    ports = [p for c in pod.get("spec", {}).get("containers", []) for p in c.get("ports") or []]
    named = [p for p in ports if p.get("name") == "http"]
    chosen = named or ports
    return int(chosen[0]["containerPort"]) if chosen else fallback


def is_ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


async def _scrape(kube: Kube, pod: dict[str, Any], port: int, direct: bool) -> tuple[str, PodMetrics | str]:
    name = pod["metadata"]["name"]
    pod_ip = pod.get("status", {}).get("podIP") if direct else None
    if direct and not pod_ip:
        return name, "no pod IP yet"
    try:
        return name, parse_pod_metrics(await kube.pod_get(name, port, "metrics", pod_ip=pod_ip))
    except (KubeError, MetricsError) as exc:
        return name, str(exc)


@app.command()
@run
async def top(
    name: NameArg,
    direct: Annotated[
        bool,
        typer.Option(
            "--direct", help="Scrape pod IPs directly (from inside the cluster network) instead of via the pod proxy."
        ),
    ] = False,
    output: OutputOpt = Output.TABLE,
    namespace: NamespaceOpt = None,
    context: ContextOpt = None,
    kubeconfig: KubeconfigOpt = None,
) -> None:
    """Live metrics of each ready replica, read from its /metrics through the API server's pod proxy (or --direct)."""
    async with connect(target(namespace, context, kubeconfig)) as kube:
        md = parse(await kube.get(name))
        if not md.status.selector:
            raise KubeError(f"modeldeployment {name!r} has no pods yet (status.selector is not set by the operator)")
        pods = [p for p in await kube.list_pods(md.status.selector) if is_ready(p)]
        if not pods:
            raise KubeError(f"modeldeployment {name!r} has no ready pods")
        results = await asyncio.gather(*(_scrape(kube, p, metrics_port(p, md.spec.service.port), direct) for p in pods))
    rows = render.top_rows(sorted(results))
    if output is not Output.TABLE:
        emit(rows, output)
        return
    render.stdout().print(render.top_table(rows))


@app.command()
@run
async def explain(
    name: NameArg,
    output: OutputOpt = Output.TABLE,
    namespace: NamespaceOpt = None,
    context: ContextOpt = None,
    kubeconfig: KubeconfigOpt = None,
) -> None:
    """Why the replica count is what it is: the last scaling decision, its signals against the targets."""
    async with connect(target(namespace, context, kubeconfig)) as kube:
        md = parse(await kube.get(name))
    data = render.explain_data(md)
    if output is not Output.TABLE:
        emit(data, output)
        return
    render.explain(render.stdout(), data)


class Dtype(StrEnum):
    AUTO = "auto"
    BFLOAT16 = "bfloat16"
    FLOAT16 = "float16"
    FLOAT32 = "float32"


def gpu_memory_bytes(value: str) -> int:
    """``--gpu-memory`` as bytes: a Kubernetes quantity, as ``spec.resources`` takes sizes."""
    try:
        size = int(parse_quantity(value))
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    if size < 1:
        raise typer.BadParameter(f"{value!r} is not a positive size")
    return size


def weights_source(checkpoint: Checkpoint) -> tuple[str, int | None]:
    """Where the weight size comes from, and the stored size when it is used as is (quantized tensors)."""
    tensors = checkpoint.safetensors
    if tensors is None:
        return f"estimated from {checkpoint.config_path.name}", None
    files = f"{tensors.files} safetensors file{'s' if tensors.files > 1 else ''}"
    if tensors.quantized:
        return f"stored size of {files} (quantized tensors: not converted to --dtype)", tensors.data_bytes
    return f"counted from the headers of {files}", None


@app.command()
def plan(
    model: Annotated[
        Path,
        typer.Argument(
            metavar="MODEL_OR_CONFIG",
            help="A Hugging Face config.json, or a model folder holding one (its *.safetensors headers, if any,"
            " give the real parameter count).",
        ),
    ],
    context: Annotated[int, typer.Option("--context", min=1, help="Tokens per request: prompt plus output.")],
    concurrency: Annotated[int, typer.Option("--concurrency", min=1, help="Requests to serve at once.")],
    gpu_memory: Annotated[
        int,
        typer.Option(
            "--gpu-memory", metavar="QUANTITY", parser=gpu_memory_bytes, help="Memory of one GPU (80Gi, 141Gi, ...)."
        ),
    ] = "80Gi",  # type: ignore[assignment]  # parsed by gpu_memory_bytes
    dtype: Annotated[Dtype, typer.Option("--dtype", help="Weights' dtype; auto: the engine's on a GPU.")] = Dtype.AUTO,
    kv_dtype: Annotated[
        Dtype, typer.Option("--kv-dtype", help="KV cache's dtype; auto: the weights' (as the engine keeps it).")
    ] = Dtype.AUTO,
    memory_fraction: Annotated[
        float,
        typer.Option(
            "--memory-fraction",
            min=0.01,
            max=1.0,
            help="Share of each GPU's memory left free by the weights that the KV cache gets, as the engine"
            " sizes it when kvCacheMemory is unset (the rest: activations, CUDA graphs, the runtime).",
        ),
    ] = sizing.DEFAULT_MEMORY_FRACTION,
    output: OutputOpt = Output.TABLE,
) -> None:
    """The KV-cache arithmetic that sizes a deployment: bytes per token and per request, the weights, requests per
    GPU, and the tensor-parallel size and replicas a load of --concurrency requests of --context tokens needs.

    Reads only the checkpoint's config.json and safetensors headers (no network, no torch).
    Every layer counts as full attention (an upper bound for sliding-window models); tensor parallelism
    (a power of two up to 8 dividing the attention heads) splits the weights and the KV heads evenly,
    and the size chosen is the one that serves the load with the fewest GPUs.
    """
    try:
        checkpoint = load_checkpoint(model)
        shape = sizing.model_shape(checkpoint.config)
        weights_from, stored_bytes = weights_source(checkpoint)
        tensors = checkpoint.safetensors
        parameters = tensors.parameters if tensors is not None else sizing.estimate_parameters(shape)
        result = sizing.plan(
            shape,
            parameters=parameters,
            context=context,
            concurrency=concurrency,
            gpu_memory_bytes=gpu_memory,
            dtype=dtype.value,
            kv_dtype=kv_dtype.value,
            memory_fraction=memory_fraction,
            weight_bytes=stored_bytes,
        )
    except CheckpointError as exc:
        raise fail(str(exc), ExitCode.USAGE) from None
    except sizing.SizingError as exc:
        raise fail(f"{model}: {exc}", ExitCode.USAGE) from None
    data = render.plan_data(result, shape, str(model), weights_from)
    if output is not Output.TABLE:
        emit(data, output)
        return
    render.plan_view(render.stdout(), data)


@app.command()
def crd() -> None:
    """Print the ModelDeployment CustomResourceDefinition (generated from the API types)."""
    typer.echo(crd_yaml(), nl=False)
