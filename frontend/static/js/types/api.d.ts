// The API's answers as the OpenAPI document describes them (the server's pydantic models). Written by
// tests/frontend/api_types.py (python -m tests.frontend.api_types); do not edit:
// tests/frontend/test_api_types.py fails when this file and the document differ.

export interface AmdahlFitPublic {
  serial_fraction: number;
  r2: number;
  /** r2 reaches the fits' r2_bound: false, the law is not drawn */
  describes_points: boolean;
}

export interface CardOriginPublic {
  /** the URL the card was exported from */
  url: string | null;
  /** that server's name for itself */
  instance: string | null;
  /** the experiment's id there */
  original_id: string;
  /** the card's content hash, sha256:... */
  content_hash: string;
  /** the card's format */
  card_version: number;
  /** when it was exported there */
  exported_at: string;
  /** who exported it there */
  exported_by: string | null;
  /** when it was imported here */
  imported_at: string;
  /** who imported it here */
  imported_by: string;
}

export type Channel = "email" | "webhook";

/** A cluster: its partitions and limits, how jobs start there, and what users may set. */
export interface ClusterProfile {
  name: string;
  description: string;
  /** Slurm account for every job, unless a user sets one */
  account: string | null;
  qos: string | null;
  partitions: Record<string, Partition>;
  default_partition: string;
  container: Container;
  /** environment modules to load before starting the worker */
  modules: string[];
  /** environment for every task: NCCL and gloo settings */
  env: Record<string, string>;
  /** runtime none: the Python with torch on the nodes; default: the server's setting */
  worker_python: string | null;
  /** seconds before the time limit that Slurm signals the worker to save */
  signal_before_end_s: number;
  /** times a job saved at its limit runs again */
  max_requeues: number;
  /** options users may set */
  sbatch_options: Record<string, SbatchOption>;
  /** every run shares the nodes (one machine for all, as the local profile): exclusive experiments run one run at a time instead of asking Slurm for whole nodes */
  shared_nodes: boolean;
  /** directories under which users may name a training run's directory as an inference checkpoint; none: only scalelab's own runs, chosen by id */
  checkpoint_roots: string[];
  /** directories under which a program's workdir may be ('~': the home of the account its job runs as), besides the server's SCALELAB_PROGRAM_ROOTS; none: no program runs */
  program_roots: string[];
  /** per tier (intra_node, inter_node) and backend, the bus bandwidth a training run's fabric pre-flight is expected to reach, with its source; none: the spread of earlier probes of the same shape */
  fabric_reference: Record<string, Record<string, FabricBand>>;
}

export type Collective = "all_reduce" | "all_gather" | "reduce_scatter" | "broadcast" | "send_recv";

export interface ComparePublic {
  /** the experiment compared, if one was asked for alone */
  experiment_id: string | null;
  data: CompareRow[];
  count: number;
  /** run id -> its epochs in order, when asked for with history=true */
  histories: Record<string, EpochPoint[]> | null;
  /** the custom metrics of the rows, each name once, sorted */
  metric_names: string[];
}

export interface CompareRow {
  run_id: string;
  state: RunState;
  strategy: Strategy;
  gpus: number;
  nodes: number;
  /** none: a program run that does not declare its batch (program.batch), whose batch is its own */
  global_batch_size: number | null;
  epochs_done: number;
  /** the median of the timed epochs (the first is warm-up) */
  mean_epoch_time_s: number | null;
  /** the baseline point's time over this point's (means over repeats); weak scaling: scaled speed-up */
  speedup: number | null;
  /** strong: speed-up over the ratio of GPUs; weak: time per step at the baseline over time per step */
  efficiency: number | null;
  final_train_loss: number | null;
  final_val_loss: number | null;
  final_val_accuracy: number | null;
  samples_per_s: number | null;
  peak_memory_bytes: number | null;
  experiment_id: string;
  /** the run's scaling series: its strategy and whatever else tells it apart from the other series */
  series: string;
  /** the run has ended and all its output has been read: its figures are final */
  ingest_done: boolean;
  /** why a figure of this row may be wrong, and what to do */
  flags: Flag[];
  scaling: "strong" | "weak";
  seed: number;
  /** epochs after the first (warm-up) that were timed */
  timed_epochs: number;
  /** the fastest timed epoch */
  epoch_time_min_s: number | null;
  /** the slowest timed epoch */
  epoch_time_max_s: number | null;
  /** median over timed epochs of the time per step */
  step_time_s: number | null;
  /** the point this run belongs to (its series at its GPU count): mean over repeats of the time that scaling compares (strong: epoch time; weak: step time) */
  point_mean_s: number | null;
  /** 95 % confidence interval (Student's t) */
  point_ci_low_s: number | null;
  point_ci_high_s: number | null;
  /** repeats in the point */
  point_n: number;
  speedup_ci_low: number | null;
  speedup_ci_high: number | null;
  /** the GPU count speed-up is measured against */
  baseline_gpus: number | null;
  /** seconds per step by part (data, compute, optimizer, comm), median epoch */
  time_breakdown: Record<string, number> | null;
  /** the fastest rank's time per step */
  step_time_fastest_s: number | null;
  /** the slowest rank's time per step */
  step_time_slowest_s: number | null;
  /** from Slurm's accounting, once the run ended */
  resources: RunResources | null;
  /** the run's own metrics (a program's custom epoch fields), of its last epoch */
  metrics: Record<string, number>;
  /** what peak_memory_bytes measures: cuda_allocated, cpu_tensors or cpu_max_rss */
  memory_kind: string | null;
  /** memory_kind in words, for a chart's label */
  memory_measure: string | null;
  /** the largest peak resident set of the run's processes */
  peak_rss_bytes: number | null;
  /** the wall time of the run's launches together (a requeued job's summed), start-up included, as its batch script timed them; none while a launch is under way, or when one was killed with its job */
  run_time_s: number | null;
  /** the time its point compares (point_mean_s); none while the run is in no point */
  measure: ("epoch_time_s" | "step_time_s" | "run_time_s") | null;
  /** the step model's time per step for this run's layout, from a 1-process run and the fabric's fits */
  predicted_step_time_s: number | null;
  /** whether an epoch reached the experiment's target (false also while a live run has not yet); none: no target */
  target_reached: boolean | null;
  /** the epoch that first reached the target */
  epochs_to_target: number | null;
  /** training time to the end of the epoch that first reached the target: the sum of the epochs' times (epoch_time_s, training steps only) from the first epoch, a resumed run's earlier attempts included; start-up, evaluation and checkpoints not included (run_time_s beside it is the job's wall time) */
  time_to_target_s: number | null;
  /** the run ended at the target (stop_at_target), before its planned epochs */
  stopped_at_target: boolean;
  /** time to target at the series' baseline over this point's (each its point's score) */
  effective_speedup: number | null;
  /** epochs to target at the baseline over this point's (means over the runs that reached) */
  statistical_efficiency: number | null;
  /** the experiment's target the run is scored against */
  target: Target | null;
  /** FLOPs per training sample (forward x 3, recomputation left out): the server's count from the spec for the built-in worker, the program's own report (model_flops_per_sample) for a program */
  model_flops_per_sample: number | null;
  /** the same with the forward activation checkpointing recomputes (HFU's numerator) */
  hardware_flops_per_sample: number | null;
  /** one device's peak as the run's compute probe measured it (dense matmul, TFLOP/s) */
  peak_tflops_measured: number | null;
  /** one device's dense datasheet peak at the run's precision; none on CPU */
  peak_tflops_datasheet: number | null;
  /** which datasheet that peak comes from */
  peak_datasheet_source: string | null;
  /** model FLOPs utilisation against the measured peak */
  mfu: number | null;
  /** model FLOPs utilisation against the datasheet peak */
  mfu_datasheet: number | null;
  /** hardware FLOPs utilisation against the measured peak (activation checkpointing) */
  hfu: number | null;
  /** hardware FLOPs utilisation, datasheet peak */
  hfu_datasheet: number | null;
}

export interface Container {
  runtime: Runtime;
  /** pyxis: image or .sqsh; podman: image; apptainer: .sif file; cscs (optional): the image the environment definition names, so that the batch script records its digest */
  image: string | null;
  /** cscs: the environment definition (edf.toml) to use */
  edf: string | null;
  /** the Python inside the image */
  python: string;
  /** directories to mount besides the run directory */
  mounts: string[];
  /** more arguments for the runtime, e.g. podman's --userns=keep-id */
  extra_args: string[];
}

export type Dataset = "synthetic" | "digits" | "cifar10" | "text";

export type DeliveryState = "pending" | "delivered" | "failed";

/** One epoch of a run's history, as its last print of that epoch gave it. */
export interface EpochPoint {
  epoch: number;
  train_loss: number;
  val_loss: number | null;
  val_accuracy: number | null;
  epoch_time_s: number;
  samples_per_s: number | null;
  step_time_s: number | null;
  step_time_fastest_s: number | null;
  step_time_slowest_s: number | null;
  time_breakdown: Record<string, number> | null;
  /** as the run reported it */
  model_flops_per_sample: number | null;
  hardware_flops_per_sample: number | null;
  /** the epoch's custom metrics, by name */
  metrics: Record<string, number>;
}

export interface ExperimentCreated {
  /** free text, shown on the dashboard */
  name: string;
  id: string;
  /** who submitted it (none: from before there were users) */
  owner: string | null;
  created_at: string;
  request: Record<string, unknown>;
  /** who besides its owner and the admins may see it, read-only: nobody (private), the members of `sharing_group` (group), or everyone signed in (everyone) */
  sharing: "private" | "group" | "everyone";
  /** the Unix group it is shared with */
  sharing_group: string | null;
  run_count: number;
  /** how many runs are in each state */
  states: Record<string, number>;
  /** imported from a scaling card (POST /api/cards): where it came from; it is read-only. Told of one experiment (GET /api/experiments/{id}), not in lists */
  card: CardOriginPublic | null;
  runs: RunPublic[];
  /** combinations left out (on_invalid: skip) */
  skipped: SkippedRun[];
}

export interface ExperimentFabricPublic {
  experiment_id: string;
  data: ProbeRunFabric[];
  count: number;
}

export interface ExperimentPreview {
  name: string;
  /** the run specs the grid expands into, in submission order */
  runs: RunSpec[];
  count: number;
  /** combinations left out (on_invalid: skip) */
  skipped: SkippedRun[];
  /** memory per GPU of each run: parameters, gradients, optimizer state, activations */
  estimates: RunEstimate[];
  /** which run's batch script `script` is */
  index: number;
  /** that run's batch script; RUN_ID stands for the id its run would get */
  script: string;
  /** the Slurm job array's script that run goes in with the runs like it (one sbatch; each task starts its run's own batch script); RUN_ID_<n> stands for the id run n would get. None: it goes as a job of its own, `array_note` says why */
  array_script: string | null;
  /** why the run goes as a job of its own, not in an array */
  array_note: string | null;
}

/** What a healthy fabric gives a training run's pre-flight on one tier and backend: the bus bandwidth of its largest all-reduce (worker/probe.py's pre-flight: up to 64 MiB, as the time allows), in GB/s (10^9 bytes/s, as nccl-tests prints it), and where that range comes from. */
export interface FabricBand {
  /** [lowest, highest] expected bus bandwidth, GB/s */
  busbw_gb_per_s: [number, number];
  /** where the range comes from: a datasheet, an nccl-tests run, the operator's own probes */
  source: string;
}

/** One tier of one probe: where it was measured, its curve and its fit. */
export interface FabricEntry {
  shape: FabricShape;
  /** a training run's pre-flight (a few all-reduces), not a probe run */
  preflight: boolean;
  ranks: number;
  points: FabricPoint[];
  /** latency: seconds per collective, fitted over the points */
  alpha_s: number;
  /** bus bandwidth the largest messages reach, fitted over the points */
  beta_bytes_per_s: number;
  /** how well alpha and beta explain the points: the root mean square of each point's relative error (0.1: the fit's times are typically 10 % off the measured ones) */
  fit_error: number;
  /** the run it came from */
  run_id: string;
  measured_at: string;
  /** a pre-flight below what its fabric is expected to give: why (fabric_degraded) */
  degraded: string | null;
}

/** One tier's latency-bandwidth fit the prediction used (contract.fabric.AlphaBeta). */
export interface FabricFitPublic {
  /** intra_node or inter_node */
  tier: string;
  /** latency per collective, seconds */
  alpha_s: number;
  /** bus bandwidth large messages reach, bytes per second */
  beta_bytes_per_s: number;
}

export interface FabricPoint {
  collective: Collective;
  ranks: number;
  /** the buffer's bytes as nccl-tests counts them */
  nbytes: number;
  /** median time of one collective, the slowest rank's */
  seconds: number;
  /** nbytes / seconds */
  algbw_bytes_per_s: number;
  /** algbw x nccl-tests' factor for the collective and its ranks */
  busbw_bytes_per_s: number;
}

export interface FabricPublic {
  data: FabricEntry[];
  count: number;
}

export interface FabricShape {
  profile: string;
  partition: string;
  nodes: number;
  processes_per_node: number;
  backend: string;
  tier: Tier;
}

/** Why a run that did not complete ended, as one kind with one thing to do (server/services/failure_kinds.py decides and says it); the client filters on these (`scalelab rerun EXP --failed --kind out_of_memory`). */
export type FailureKind = "hung" | "out_of_memory" | "collective_timeout" | "node_failure" | "time_limit" | "import_error" | "program_error" | "launcher_error";

/** A reason not to take a figure at face value: what it means and what to do. */
export interface Flag {
  code: FlagCode;
  /** warning: the scaling figures may be wrong; info: worth knowing, the figures stand */
  severity: "warning" | "info";
  message: string;
}

export type FlagCode = "superlinear" | "oversubscribed" | "shared_node" | "noisy" | "too_short" | "warmup_dominated" | "loss_mismatch" | "incomplete" | "straggler" | "no_metrics" | "ingest_stopped" | "unequal_work" | "shared_workdir" | "cpus_beyond_allocation" | "target_not_reached" | "slower_convergence" | "converged_suspiciously_fast" | "fabric_degraded" | "regressed" | "improved" | "mfu_impossible" | "off_model";

export type FsdpSharding = "full" | "hybrid";

/** One prompt and the text an inference run generated after it. */
export interface Generation {
  /** the prompt's place among the prompts, from 0 */
  index: number;
  prompt: string;
  completion: string;
  /** tokens of the prompt the model saw (it keeps the last ones that fit) */
  prompt_tokens: number;
  new_tokens: number;
}

export interface GenerationsPublic {
  run_id: string;
  data: Generation[];
  count: number;
  /** the run wrote its generations (they appear all at once, when it is done) */
  complete: boolean;
}

/** One experiment of the reference's spec, as its figure stood against the reference. */
export interface HistoryEntry {
  experiment_id: string;
  name: string;
  created_at: string;
  role: "reference" | "aa" | "later";
  verdict: "regressed" | "improved" | "indistinguishable" | "no_verdict";
  points: RegressionPoint[];
  /** its runs' image, where they name one (one of them if many) */
  image: string | null;
  image_digest: string | null;
  torch_version: string | null;
  worker_version: string | null;
  source_revision: string | null;
  /** the nodes its runs ran on */
  nodes: string[];
}

export interface InferencePublic {
  experiment_id: string;
  data: InferenceRow[];
  count: number;
}

/** One inference run's figures, for comparing layouts and compile on/off. */
export interface InferenceRow {
  run_id: string;
  state: RunState;
  strategy: Strategy;
  tp: number;
  compile: boolean;
  precision: string;
  batch_size: number;
  /** aggregate over all prompts */
  tokens_per_s: number | null;
  /** mean over the prompts */
  request_tokens_per_s: number | null;
  /** mean time to first token */
  ttft_s: number | null;
  /** per-token latency, median */
  latency_p50_s: number | null;
  latency_p95_s: number | null;
  load_time_s: number | null;
  compile_time_s: number | null;
  /** the largest over the ranks */
  peak_memory_bytes: number | null;
  /** each rank's peak memory in bytes, by rank */
  memory_per_rank: number[];
  memory_kind: string | null;
  /** the run has ended and all its output has been read: its figures are final */
  ingest_done: boolean;
}

export type Launcher = "srun" | "torchrun";

/** How a run's learning rate follows its global batch against the grid's smallest (the reference). */
export type LrScaling = "none" | "linear" | "sqrt";

/** Bytes one GPU holds at the peak of a training step (for pp: the stage that holds the most). */
export interface MemoryEstimate {
  /** trainable parameters of the whole model */
  parameter_count: number;
  /** samples in one forward pass on one GPU (pp: one pipeline microbatch) */
  micro_batch: number;
  /** fp32 parameters this GPU holds (its shard or split) */
  parameters_bytes: number;
  gradients_bytes: number;
  /** SGD momentum: one fp32 buffer per parameter held */
  optimizer_state_bytes: number;
  /** what backward keeps, from an analytical count, not measured */
  activations_bytes: number;
  /** DDP gradient buckets, FSDP's gathered parameters, autocast's low-precision weight copies */
  buffers_bytes: number;
  /** the whole data set, which the worker keeps on every GPU */
  data_bytes: number;
  total_bytes: number;
  /** pp: the stage estimated, the one holding most */
  pipeline_stage: number | null;
  /** one line on how the figures were computed */
  basis: string;
}

export type Model = "mlp" | "cnn" | "resnet18" | "gpt";

/** One GPU count of a series: what the step model predicts, and what was measured there. */
export interface ModelPoint {
  gpus: number;
  nodes: number;
  /** predicted seconds per step; none: see unavailable */
  step_time_s: number | null;
  /** predicted step x the layout's steps per epoch */
  epoch_time_s: number | null;
  /** predicted, against the series' smallest predicted point */
  speedup: number | null;
  /** predicted speed-up over the ratio of GPUs (weak: step ratio) */
  efficiency: number | null;
  /** the 1-process run's compute, data and optimizer, scaled */
  compute_s: number | null;
  /** exposed communication: the collectives' time less measured overlap */
  comm_s: number | null;
  /** a pipeline stage's idle time, (p-1)/m of its compute */
  bubble_s: number | null;
  /** the collectives' time before overlap */
  comm_total_s: number | null;
  /** the share of communication taken as hidden */
  overlap_fraction: number | null;
  /** why no prediction: no fit, or a refused layout */
  unavailable: string | null;
  /** the point's runs' median step, mean */
  measured_step_time_s: number | null;
  /** (measured - predicted) / predicted: positive, slower than the model */
  residual: number | null;
  /** the series' runs at this GPU count */
  run_ids: string[];
}

export interface ModelSeries {
  series: string;
  strategy: string;
  scaling: "strong" | "weak";
  /** the finished 1-process run the compute is scaled from */
  reference_run_id: string | null;
  /** in words: what the prediction is made of, or why there is none */
  basis: string;
  points: ModelPoint[];
}

/** The relative difference below which two measurements of one spec on a profile are not told apart. */
export interface NoiseFloor {
  profile: string;
  /** a ratio within [1 / (1 + floor), 1 + floor] is not called a change */
  floor: number;
  /** aa_pairs: the 95th percentile (nearest rank) of |ratio - 1| over the profile's A/A points; default: the profile has no A/A pair yet, and 0.22 (the upper end of paired differences reported between identical configurations on shared clusters) stands in */
  source: "default" | "aa_pairs";
  /** A/A points the floor is learned from */
  points: number;
  /** each A/A point's ratio, later over reference */
  ratios: number[];
}

export interface NotificationDeliveriesPublic {
  data: NotificationDeliveryPublic[];
  count: number;
}

export interface NotificationDeliveryPublic {
  event: NotifyEvent;
  channel: Channel;
  /** the address or URL, as it was when queued */
  target: string;
  subject: string;
  /** the message: one line, then its details */
  text: string;
  experiment_id: string | null;
  run_id: string | null;
  state: DeliveryState;
  attempts: number;
  created_at: string;
  /** none once it is settled */
  next_attempt_at: string | null;
  delivered_at: string | null;
  last_error: string | null;
  /** each attempt: {at, ok, error}, oldest first (at most SCALELAB_NOTIFY_MAX_ATTEMPTS) */
  history: Record<string, unknown>[];
  id: number;
}

export interface NotificationSettingsPublic {
  /** the events to be told of: experiment_ended, run_failed (failed or hung), regression */
  events: NotifyEvent[];
  /** where e-mail goes; none: no e-mail */
  email: string | null;
  /** where a JSON POST with a Slack/Mattermost-compatible `text` goes, among the URLs the operator allows (SCALELAB_WEBHOOK_ALLOW); none: no webhook */
  webhook_url: string | null;
  /** whether this server can send e-mail (the operator set a transport) */
  email_available: boolean;
  /** whether the operator allows any webhook URL */
  webhooks_available: boolean;
}

export type NotifyEvent = "experiment_ended" | "run_failed" | "regression" | "test";

export type OptionKind = "int" | "time" | "choice" | "word" | "memory";

export type ParamsStyle = "flags" | "env";

export interface Partition {
  max_nodes: number;
  /** training processes a node takes: GPUs, or CPU slots */
  gpus_per_node: number;
  /** the partition's wall-time limit, [D-]HH:MM:SS */
  max_time: string;
  /** GRES name for GPUs, e.g. "gpu" or "gpu:a100"; none: processes are CPU tasks */
  gres: string | null;
  /** memory of one GPU, for estimates */
  gpu_memory_gib: number | null;
  cpus_per_task: number | null;
}

export type PipelineSchedule = "gpipe" | "1f1b";

/** One point of the request's grid (its repeats together), predicted. */
export interface PlanPoint {
  strategy: string;
  gpus: number;
  nodes: number;
  /** the point's run spec (its first repeat's) */
  spec: Record<string, unknown>;
  /** the grid's runs at this point */
  repeats: number;
  /** predicted seconds per step; none: see unavailable */
  step_time_s: number | null;
  epoch_time_s: number | null;
  /** predicted compute seconds per step */
  compute_s: number | null;
  /** predicted exposed communication seconds per step (after the measured overlap) */
  comm_s: number | null;
  /** predicted pipeline bubble seconds per step */
  bubble_s: number | null;
  /** predicted, against its series' smallest predicted point */
  speedup: number | null;
  /** predicted speed-up over the ratio of GPUs (weak: step ratio) */
  efficiency: number | null;
  /** the preview's analytical estimate (server.services.estimate) */
  memory_per_gpu_bytes: number;
  /** predicted epoch x epochs x GPUs x repeats, in hours */
  gpu_hours: number | null;
  /** why no prediction */
  unavailable: string | null;
}

export interface PlanPublic {
  /** the plan's id, also its experiment's (the probes and 1-process runs) */
  id: string;
  name: string;
  goal: "fastest_epoch" | "largest_n_at_efficiency";
  efficiency: number;
  /** running: some of its runs have not ended; failed: one it needs did not complete; ready: predicted */
  state: "running" | "ready" | "failed";
  /** running: the ids of its runs still to end */
  waiting_for: string[];
  /** failed: the ids of its runs that did not complete */
  failed: string[];
  probe_run_ids: string[];
  /** per strategy, its 1-process run's id */
  reference_run_ids: Record<string, string>;
  /** ready: the fabric fits used, per tier */
  fits: FabricFitPublic[];
  /** ready: every point of the request's grid */
  points: PlanPoint[];
  /** ready: the strategy and GPU count for the goal; none where no point qualifies */
  recommendation: PlanRecommendation | null;
  /** the recommended points' predicted cost */
  recommended_gpu_hours: number | null;
  /** the whole grid's predicted cost */
  grid_gpu_hours: number | null;
  /** false: some grid points have no prediction, so grid_gpu_hours counts only those that do (a lower bound) */
  gpu_hours_complete: boolean;
}

export interface PlanRecommendation {
  strategy: string;
  gpus: number;
  nodes: number;
  /** in words: the goal and the figures that chose it */
  why: string;
}

/** A point's medians over its runs (every run of its series at its GPU count, timed or not) of the figures the comparison gives per run, each over the runs that have it; none where no run has it. */
export interface PointMedians {
  /** seconds per step by part (data, compute, optimizer, comm), over the runs with the part */
  time_breakdown: Record<string, number>;
  /** runs with a time breakdown */
  time_breakdown_n: number;
  /** over the runs whose cluster gathers it */
  device_hours_per_epoch: number | null;
  /** over the runs whose cluster gathers it */
  energy_per_sample_j: number | null;
  final_train_loss: number | null;
  final_val_loss: number | null;
  final_val_accuracy: number | null;
  /** of the runs' own medians of their timed epochs */
  mean_epoch_time_s: number | null;
  samples_per_s: number | null;
  /** each of the runs' own metrics, of their last epoch */
  metrics: Record<string, number>;
}

export type Precision = "fp32" | "bf16" | "fp16";

export interface PredictedPoint {
  gpus: number;
  law: "amdahl" | "usl";
  speedup: number;
}

export interface PredictionPublic {
  experiment_id: string | null;
  /** off_model: a measured point this much slower than predicted is flagged */
  tolerance: number;
  /** the fabric fits used, per tier */
  fits: FabricFitPublic[];
  series: ModelSeries[];
}

/** One run of a probe experiment: the shape it probes, how it stands, and what it measured once its output has been read (a tier it could not fit is absent). */
export interface ProbeRunFabric {
  run_id: string;
  state: RunState;
  profile: string;
  partition: string;
  nodes: number;
  processes_per_node: number;
  /** the backend its probe measured with; none until it has measured */
  backend: string | null;
  /** why it did not complete, as a kind with a remedy */
  failure_kind: FailureKind | null;
  /** the evidence for its failure kind and what to do */
  failure_detail: string | null;
  /** what went wrong, for the user (a run that could not be submitted) */
  message: string | null;
  /** the run has ended and all its output has been read: its figures are final */
  ingest_done: boolean;
  /** each tier it measured: its curve, fit and the fit's error */
  tiers: FabricEntry[];
}

export interface ProfilesPublic {
  data: ClusterProfile[];
  count: number;
  /** the profile of runs that name none */
  default: string;
}

/** The batch a program trains per step, as it declares it, so that scaling can say whether every run trains the same global batch: `per` says what the size counts (all processes together, or each process), and the size is given as a number or as the name of the parameter that holds it (one of the two). */
export interface ProgramBatch {
  /** global: the samples per step over all processes, the same on every GPU count (strong scaling); process: each process's, so that the global batch grows with the processes */
  per: "global" | "process";
  /** the batch, where the program fixes it */
  size: number | null;
  /** the name of the program's parameter that holds the batch (params.NAME, swept or not) */
  param: string | null;
}

export type ProgramCwd = "workdir" | "run_dir";

/** A user's own program: what to run, where, how its processes start, and the values it is given. */
export interface ProgramSpec {
  /** the argv, never a shell string; 'python' as the first word is the profile's Python */
  command: string[];
  /** absolute directory on the shared file system, under one of the profile's program roots; the program starts there */
  workdir: string;
  /** srun: one task per GPU with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set; torchrun: one task per node running torchrun --nproc-per-node, meeting at the first node */
  launcher: Launcher;
  /** more environment variables for every task */
  env: Record<string, string>;
  /** a container image instead of the profile's, for runtimes that take one */
  image: string | null;
  /** where the program starts: workdir (shared by every run of it: a file one run writes there, a later run finds) or run_dir (the run's own directory; the file the command names is still found in the workdir) */
  cwd: ProgramCwd;
  /** passed as `--NAME VALUE` after the command (params_style flags) and as SCALELAB_PARAM_NAME; swept in the grid as params.NAME */
  params: Record<string, (string | number | boolean)>;
  /** flags: each parameter as `--NAME VALUE` after the command and in the environment; env: only as SCALELAB_PARAM_NAME, for a script whose argument parser refuses flags it does not know */
  params_style: ParamsStyle;
  /** the batch the program trains per step, as it declares it: scaling says whether every run trains the same global batch only where it is declared */
  batch: ProgramBatch | null;
}

export interface RankStacks {
  rank: number;
  /** its last dump of every thread's Python stack, innermost frame first (at most 64 KiB, plain text written by the job); null: it wrote none */
  text: string | null;
}

export interface ReferenceHistory {
  reference: ReferencePublic;
  floor: NoiseFloor;
  /** the reference first, then each later experiment, oldest first */
  entries: HistoryEntry[];
  /** more experiments of the spec than an answer holds */
  truncated: boolean;
}

export interface ReferencePublic {
  experiment_id: string;
  role: "reference" | "aa";
  /** sha256 of the spec fields that affect timing (README: Pinned references) */
  spec_key: string;
  profile: string;
  /** an A/A run: the reference experiment it repeats */
  pair_of: string | null;
  pinned_at: string;
  pinned_by: string | null;
}

/** One series at one process count, later against reference. */
export interface RegressionPoint {
  series: string;
  gpus: number;
  /** the time both sides compare (their series' measure) */
  measure: ("epoch_time_s" | "step_time_s" | "run_time_s") | null;
  reference_mean_s: number | null;
  reference_n: number;
  later_mean_s: number | null;
  later_n: number;
  /** later mean over reference mean: above 1, later is slower */
  ratio: number | null;
  /** 95 % bootstrap interval of the ratio (2000 resamples) */
  ci_low: number | null;
  ci_high: number | null;
  /** regressed: the ratio's whole 95 % interval lies above 1 + floor; improved: below 1 / (1 + floor); indistinguishable: otherwise; no_verdict: a side has fewer than 2 finished runs at the point (no interval) */
  verdict: "regressed" | "improved" | "indistinguishable" | "no_verdict";
  /** warnings on the reference's runs at this point: the verdict leans on them */
  reference_flags: Flag[];
  /** why the verdict is not confident, where it is not */
  hedge: string | null;
  /** the verdict as a flag: regressed or improved */
  flags: Flag[];
  reference_run_ids: string[];
  later_run_ids: string[];
}

export interface RegressionPublic {
  experiment_id: string;
  reference_id: string;
  /** pinned: the reference pinned for this experiment's spec; chosen: another experiment asked for */
  against: "pinned" | "chosen";
  /** both have the same spec key; false: the figures compare unlike work */
  same_spec: boolean;
  floor: NoiseFloor;
  /** over every point: regressed if any point is, else improved if any is */
  verdict: "regressed" | "improved" | "indistinguishable" | "no_verdict";
  /** some point's reference carries a warning, or the specs differ */
  hedged: boolean;
  summary: string;
  points: RegressionPoint[];
  /** points on one side only, as 'series at N GPUs' */
  unmatched: string[];
  resamples: number;
  seed: number;
}

export interface RunEstimate {
  /** the run's position in `runs` */
  index: number;
  /** memory per GPU; none when the worker would refuse the run */
  estimate: MemoryEstimate | null;
  /** the estimate exceeds the partition's GPU memory, or why no estimate could be made */
  warning: string | null;
}

export interface RunEventBase {
  at: string;
  kind: RunEventKind;
  job_id: string | null;
  state: RunState | null;
  scheduler_state: string | null;
  /** Slurm's reason or our message */
  detail: string | null;
}

export type RunEventKind = "submitted" | "submit_failed" | "state" | "requeued" | "cancel_requested" | "resubmitted" | "reconciled" | "output_refused" | "ingest_stopped" | "stalled" | "hang_cancelled";

export interface RunEventsPublic {
  data: RunEventBase[];
  count: number;
}

export type RunKind = "train" | "inference" | "program" | "probe";

export interface RunLog {
  run_id: string;
  /** where this text starts in the output, in bytes */
  offset: number;
  /** the offset to ask for next */
  next_offset: number;
  /** the output's size in bytes when it was read */
  size: number;
  /** the output from offset, at most the requested size, cut at a character boundary */
  text: string;
  /** the run has ended and the text reaches the end: nothing more will come */
  complete: boolean;
}

export interface RunPublic {
  experiment_id: string;
  /** who submitted it (none: from before users) */
  owner: string | null;
  /** index of the run in the experiment's grid */
  position: number;
  state: RunState;
  /** the scheduler's job id */
  job_id: string | null;
  /** slurm, local, or import (a log of a run made outside scalelab) */
  scheduler: string;
  /** the cluster profile it was rendered for */
  profile: string | null;
  /** times it was submitted (resubmissions count) */
  attempt: number;
  /** held back by the experiment's concurrency limit until a slot frees */
  waiting: boolean;
  /** the scheduler's state, verbatim */
  scheduler_state: string | null;
  /** why the job waits or ended, verbatim */
  scheduler_reason: string | null;
  /** Slurm's exit:signal */
  exit_code: string | null;
  /** the nodes the job runs or ran on, as Slurm writes them */
  nodes: string | null;
  /** what went wrong, for the user */
  message: string | null;
  run_dir: string;
  created_at: string;
  submitted_at: string | null;
  started_at: string | null;
  ended_at: string | null;
  /** the container image the run ran in, as named */
  image: string | null;
  /** that image's digest (sha256:...) */
  image_digest: string | null;
  /** the scalelab worker's version */
  worker_version: string | null;
  torch_version: string | null;
  /** the source revision the image was built from */
  source_revision: string | null;
  /** the run this one repeats, on the same image */
  rerun_of: string | null;
  /** the training run whose checkpoint this inference run reads, submitted before that run ended: its job waits in Slurm until the training completes, and ends if it does not */
  after_run: string | null;
  /** the job of after_run that this run's job waits for */
  after_job: string | null;
  /** why it did not complete, as a kind with a remedy */
  failure_kind: FailureKind | null;
  /** the evidence for its failure kind and what to do: the message quoted, or which rank hung where */
  failure_detail: string | null;
  /** when it was found stalled (no new record for longer than its bound) and its ranks were asked for their stacks; none: not stalled, or records came again since */
  stalled_at: string | null;
  id: string;
  spec: Record<string, unknown>;
  /** where it came from: submitted by scalelab, or imported from the log of a run made elsewhere */
  origin: "submitted" | "imported";
  parse_errors: number;
  /** the first unreadable metric line: where it is in the output and what is wrong */
  first_parse_error: string | null;
  /** why scalelab stopped reading its output before its end, and what to do */
  ingest_stopped: string | null;
  /** the run has ended and all its output has been read: its metrics are final */
  ingest_done: boolean;
  /** why it waits, in words, where it waits for the training run it reads (after_run) to end */
  waiting_for: string | null;
}

/** What Slurm's accounting says the run used; a figure the cluster does not gather is None and named in `not_gathered`. */
export interface RunResources {
  elapsed_s: number | null;
  /** TotalCPU / (Elapsed x AllocCPUS) */
  cpu_efficiency: number | null;
  max_rss_bytes: number | null;
  /** percent, where the cluster gathers it */
  gpu_utilization: number | null;
  energy_j: number | null;
  /** GPU-hours (CPU-hours without GPUs) of the allocation per epoch done */
  device_hours_per_epoch: number | null;
  device_kind: "gpu" | "cpu";
  energy_per_sample_j: number | null;
  /** other jobs that ran on the run's nodes during it */
  shared_with: string[];
  /** figures this cluster does not gather */
  not_gathered: string[];
  /** figures per epoch or per sample that the cluster gathers but this run gave nothing to divide by (it printed no epoch or no samples/s) */
  nothing_to_divide: string[];
}

/** Everything one training run needs; built by the server, validated again by the worker. */
export interface RunSpec {
  model: Model;
  dataset: Dataset;
  strategy: Strategy;
  /** Slurm nodes */
  nodes: number;
  /** training processes in all: one per GPU (one per CPU slot without GPUs) */
  gpus: number;
  /** tensor-parallel group size (tp: all gpus; fsdp_tp: a divisor) */
  tp_degree: number | null;
  pp_schedule: PipelineSchedule;
  /** pipeline microbatches per step; 1 is naive model parallelism */
  microbatches: number;
  /** full: shard over all processes; hybrid: shard in a node, replicate across */
  fsdp_sharding: FsdpSharding;
  epochs: number;
  /** cap on optimizer steps per epoch */
  steps_per_epoch: number | null;
  /** samples per step over all processes */
  global_batch_size: number;
  /** microsteps per optimizer step */
  grad_accum_steps: number;
  /** learning rate */
  lr: number;
  precision: Precision;
  /** torch.compile the model */
  compile: boolean;
  /** recompute activations in backward */
  activation_checkpointing: boolean;
  /** hidden layers (mlp) or blocks (gpt) */
  depth: number | null;
  /** hidden size (mlp) or embedding (gpt) */
  width: number | null;
  /** attention heads (gpt) */
  heads: number | null;
  /** tokens per sequence (gpt) */
  context: number | null;
  seed: number;
  /** epochs between checkpoints; 0: only when Slurm signals the job */
  checkpoint_every: number;
  /** a step record every N steps; 0: none */
  step_log_every: number;
  /** train a model, or generate text from a trained gpt's checkpoint */
  kind: RunKind;
  /** inference: the directory of the finished gpt training run to load (set by the server) */
  checkpoint: string | null;
  /** inference: tokens generated per prompt */
  max_new_tokens: number;
  /** inference: sampling temperature; 0 is greedy decoding */
  temperature: number;
  /** inference: sample among the k likeliest tokens only */
  top_k: number | null;
  /** kind program: the user's own program to launch instead of the worker */
  program: ProgramSpec | null;
  /** the experiment's quality target (set by the server from the request's) */
  target: Target | null;
  /** end the run at the end of the epoch that reaches the target, a checkpoint kept */
  stop_at_target: boolean;
  /** scale lr with the global batch against the grid's smallest: none, linear or sqrt */
  lr_scaling: LrScaling;
  /** epochs over which the rate rises linearly from the reference rate to lr */
  warmup_epochs: number;
  /** the rate the request gave, for reference_batch (set by the server) */
  reference_lr: number | null;
  /** the grid's smallest global batch, which lr_scaling scales from */
  reference_batch: number | null;
  /** time a few all-reduces per tier (a few seconds) in the allocation before training */
  fabric_preflight: boolean;
  /** kind probe: the time the whole probe may take; sizes stop growing by it */
  probe_seconds: number;
}

export interface RunStacks {
  run_id: string;
  /** when it was found stalled; null: not stalled, or no longer */
  stalled_at: string | null;
  /** which rank was not where the others were, once its stacks were read */
  verdict: string | null;
  /** every rank's stacks, read from its run directory now */
  ranks: RankStacks[];
}

export type RunState = "created" | "submitted" | "pending" | "running" | "completed" | "failed" | "cancelled" | "timeout" | "node_fail" | "out_of_memory" | "preempted" | "submit_failed";

export interface RunsPublic {
  data: RunPublic[];
  count: number;
}

export type Runtime = "none" | "podman" | "pyxis" | "cscs" | "apptainer";

/** An sbatch option users may set, and the values it takes. */
export interface SbatchOption {
  kind: OptionKind;
  description: string;
  choices: string[];
  min: number | null;
  max: number | null;
}

export interface ScalingFits {
  amdahl: AmdahlFitPublic | null;
  usl: UslFitPublic | null;
  /** why no law was fitted */
  refused: string | null;
  /** below this r2 a law does not describe the points, advises nothing and is not drawn */
  r2_bound: number;
  /** each law's parameters in words, rounded to what they can mean, marked where it does not describe the points; or why none was fitted */
  summary: string;
}

export interface ScalingPoint {
  gpus: number;
  /** seconds: mean over repeats of the compared time */
  mean: number;
  /** 95 % confidence interval (Student's t); none with one repeat */
  ci_low: number | null;
  ci_high: number | null;
  n: number;
  speedup: number | null;
  speedup_ci_low: number | null;
  speedup_ci_high: number | null;
  efficiency: number | null;
  flags: Flag[];
  /** every run of the series at this GPU count, timed or not, in the comparison's order */
  run_ids: string[];
  /** the per-run figures the point's runs have, each their median */
  medians: PointMedians;
}

export interface ScalingPublic {
  experiment_id: string | null;
  series: ScalingSeries[];
  /** every distinct flag of the selection's rows, worst first */
  flags: Flag[];
}

export interface ScalingSeries {
  series: string;
  strategy: Strategy;
  scaling: "strong" | "weak";
  /** the time the points compare: epoch time (strong) or step time (weak) where every run timed its epochs, else run time (a program that prints no epoch: its launches' wall time, start-up included) */
  measure: "epoch_time_s" | "step_time_s" | "run_time_s";
  baseline_gpus: number | null;
  points: ScalingPoint[];
  fits: ScalingFits;
  /** the fitted curves, to 4x the largest GPU count measured */
  predicted: PredictedPoint[];
  recommendation: string;
  /** given: the recommendation stands on clean points; hedged: it names the flagged points it rests on; withheld: no law describes the points, the baseline carries a warning or a point is superlinear, and the recommendation says that instead */
  advice: "given" | "hedged" | "withheld";
  /** what the series' runs train per step, in words, as far as it is known (a program's batch only where it declares it) */
  batch: string;
  /** the series scored by time to the experiment's target; none without a target */
  time_to_target: TimeToTarget | null;
}

export interface SkippedRun {
  /** the grid values of the combination */
  combination: Record<string, unknown>;
  reason: string;
}

export type Strategy = "single" | "ddp" | "fsdp" | "tp" | "pp" | "fsdp_tp";

/** A quality target: `metric` at least `at_least`, or at most `at_most` (exactly one of the two). */
export interface Target {
  /** the epoch metric: val_accuracy, val_loss or train_loss for the built-in worker; for a program, any figure it prints in its epoch records (its own custom metrics included) */
  metric: string;
  /** reached when metric >= this */
  at_least: number | null;
  /** reached when metric <= this */
  at_most: number | null;
}

/** A series' point scored by time to target, as MLPerf Training scores its results. */
export interface TargetPoint {
  gpus: number;
  /** the point's global batch (weak scaling: it grows with GPUs) */
  global_batch_size: number | null;
  /** the point's runs, whether they reached the target or not */
  runs: number;
  /** runs that reached the target */
  reached: number;
  /** runs that ended without reaching it: counted, never dropped */
  not_reached: number;
  /** live runs that have not reached it yet */
  unfinished: number;
  /** olympic: 5 runs or more, the mean without the fastest and the slowest (a run that did not reach counts as the slowest), with the interval of the runs it keeps; mean: fewer, the mean of the runs that reached with its 95 % interval; none: no score (no run reached, or an olympic score would keep a run that did not) */
  scoring: ("olympic" | "mean") | null;
  /** the score: seconds of training to the target */
  time_to_target_s: number | null;
  /** 95 % interval (Student's t) over the runs the score keeps (n >= 2) */
  ci_low_s: number | null;
  ci_high_s: number | null;
  /** runs the score is over */
  n: number;
  /** mean over the runs that reached of their epochs to target */
  epochs_to_target: number | null;
  epochs_ci_low: number | null;
  epochs_ci_high: number | null;
  /** the baseline's score over this point's */
  effective_speedup: number | null;
  effective_speedup_ci_low: number | null;
  effective_speedup_ci_high: number | null;
  /** the same point's speed-up in time per epoch (or step) */
  throughput_speedup: number | null;
  /** epochs to target at the baseline over this point's: below 1, the larger batch needs more epochs */
  statistical_efficiency: number | null;
  flags: Flag[];
  run_ids: string[];
}

/** Where the ranks of a collective are: all on one node, or on several. */
export type Tier = "intra_node" | "inter_node";

/** A series scored by time to its target: does adding GPUs give a trained model sooner, and by how much. */
export interface TimeToTarget {
  target: Target;
  /** what the time to target counts, exactly */
  measured_from: string;
  /** the point effective speed-up is measured against */
  baseline_gpus: number | null;
  points: TargetPoint[];
  /** the answer in words, hedged where its points are flagged */
  summary: string;
}

export interface UslFitPublic {
  /** contention */
  sigma: number;
  /** coherency */
  kappa: number;
  r2: number;
  /** where adding GPUs starts making it slower; none: no peak */
  peak_gpus: number | null;
  /** r2 reaches the fits' r2_bound: false, the law is not drawn */
  describes_points: boolean;
}
