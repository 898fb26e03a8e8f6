/**
 * The panel's state logic: pure functions of the JSON the server extension answers.
 *
 * Kept free of JupyterLab imports so that jest tests it without a browser, and so that what the
 * panel shows (bars, countdowns, banners, the share request) is decided in one place.
 */

import type { JobAnswer, JobSubmission, ShareRequest } from './service';

/** Who is looking at this server, as the server extension (hub_ext.singleuser.panel) says. */
export interface IViewer {
  name: string;
  /** true when the person looking owns the server */
  owner: boolean;
  /** the owner's access, or the share's: "owner", "edit" or "read-only" */
  access: 'owner' | 'edit' | 'read-only';
}

export interface ICullWarning {
  server_name: string;
  cull_at: string;
  seconds_left: number;
  message: string;
}

export interface IUsage {
  resources: Record<string, string>;
  servers: number;
  gpu_hours_week: number;
}

export interface ILimits {
  resources: Record<string, string>;
  servers: number | null;
  gpu_hours_per_week: string | null;
}

export interface ICourseUsage {
  role: string;
  usage: IUsage;
  limits: ILimits;
  course_limits?: ILimits;
}

export interface IShare {
  id: number;
  owner: string;
  server_name?: string;
  kind: string;
  path?: string | null;
  target_kind?: string;
  target?: string | null;
  expires_at?: string | null;
  active?: boolean;
  open_url?: string;
}

/** A submission of mine, as the assignments API shows it (with its grading when autograded). */
export interface ISubmission {
  id: number;
  submitted_at: string;
  late: boolean;
  files: number;
  skipped: string[];
  latest: boolean;
  score?: number | null;
  max_score?: number | null;
  /** the last grading: its state (queued, done, failed) and sentence; the cells are on the page */
  feedback?: { state?: string | null; message?: string } | null;
}

/** An open assignment of one of my courses, with my own submissions (the assignments API). */
export interface IAssignment {
  course: string;
  name: string;
  title: string;
  folder: string;
  due_at: string;
  late_policy: string;
  accepting: boolean;
  late_now: boolean;
  my_submissions: ISubmission[];
  autograded?: boolean;
  max_score?: number | null;
}

/** One line about an assignment: when it is due and my last submission. */
export function describeAssignment(a: IAssignment, when: (iso: string) => string): string {
  const last = a.my_submissions.length ? a.my_submissions[a.my_submissions.length - 1] : null;
  const mine = last
    ? `submitted ${when(last.submitted_at)}${last.late ? ' (late)' : ''}`
    : 'not submitted yet';
  return `${a.title || a.name} (${a.course}), due ${when(a.due_at)}: ${mine}`;
}

/** A number of points as the course page writes it: 5, 4.5, or a dash for none. */
function points(value: number | null | undefined): string {
  return value === null || value === undefined ? '–' : String(Number(value.toPrecision(6)));
}

/**
 * My score on an autograded assignment, from my last submission: "Score 5 / 6", "Grading…"
 * while its job waits or runs, and the grading's sentence after the score when grading did not
 * finish ("Not graded." when nothing was scored); null when there is nothing to say (not
 * autograded, or not submitted).
 */
export function assignmentScore(a: IAssignment): string | null {
  const last = a.my_submissions.length ? a.my_submissions[a.my_submissions.length - 1] : null;
  if (!a.autograded || !last) {
    return null;
  }
  const feedback = last.feedback;
  if (!feedback || feedback.state === 'queued') {
    return 'Grading…';
  }
  const scored = last.score !== null && last.score !== undefined;
  const score = scored ? `Score ${points(last.score)} / ${points(last.max_score ?? a.max_score)}` : 'Not graded yet';
  return feedback.state === 'failed' ? `${scored ? score : 'Not graded'}. ${feedback.message || ''}`.trim() : score;
}

/** The assignment's card on its course page, where my feedback is (cell by cell). */
export function assignmentPageUrl(hubPrefix: string | undefined, a: IAssignment): string {
  const root = (hubPrefix || '/hub/').replace(/hub\/$/, '');
  return `${root}services/classhub/courses/${encodeURIComponent(a.course)}#assignment-${encodeURIComponent(a.name)}`;
}

/** A row of a competition's leaderboard (``me``: my own row). */
export interface IBoardRow {
  rank: number;
  student: string;
  score: number | null;
  submitted_at: string;
  submissions: number;
  me: boolean;
}

/** A competition of one of my courses, as the competitions API shows it to me. */
export interface ICompetition {
  course: string;
  name: string;
  title: string;
  metric: string;
  ends_at: string;
  ended: boolean;
  accepting: boolean;
  daily_limit: number;
  left_today: number;
  /** whether it takes notebooks that run as jobs and write `predictions_file` */
  takes_notebooks?: boolean;
  predictions_file?: string | null;
  my_submissions: {
    id: number;
    submitted_at: string;
    public_score: number | null;
    state?: 'pending' | 'scored' | 'failed';
    message?: string;
  }[];
  leaderboard: {
    shown: 'public' | 'private';
    public: IBoardRow[] | null;
    private: IBoardRow[] | null;
  };
}

/** A score as the course page writes it (four decimals), or a dash. */
export function formatScore(score: number | null | undefined): string {
  return score === null || score === undefined ? '–' : score.toFixed(4);
}

/**
 * One line about a competition: when it ends, my best score and rank on the split that counts
 * now (public during, private after the end), and how many submissions I have left today.
 */
export function describeCompetition(c: ICompetition, when: (iso: string) => string): string {
  const board = c.leaderboard[c.leaderboard.shown] || [];
  const mine = board.find(r => r.me);
  const split = c.leaderboard.shown;
  const standing = mine
    ? `best ${split} ${c.metric} ${formatScore(mine.score)}, rank ${mine.rank} of ${board.length}`
    : c.my_submissions.length
      ? `${c.my_submissions.length} submitted`
      : 'not submitted yet';
  const left = c.ended
    ? 'final'
    : c.accepting
      ? `${c.left_today} of ${c.daily_limit} left today`
      : 'not open';
  const pending = c.my_submissions.filter(s => s.state === 'pending').length;
  const last = c.my_submissions[c.my_submissions.length - 1];
  const news = pending
    ? `; ${pending} pending`
    : last?.state === 'failed'
      ? `; last one failed: ${last.message}`
      : '';
  return `${c.title || c.name} (${c.course}), ${c.ended ? 'ended' : 'ends'} ${when(c.ends_at)}: ${standing}; ${left}${news}`;
}

/** What the panel says after a predictions file was scored. */
export function scoredText(
  c: Pick<ICompetition, 'title' | 'name' | 'metric'>,
  publicScore: number | null
): string {
  return `Scored ${c.title || c.name}: public ${c.metric} ${formatScore(publicScore)}.`;
}

/** What the panel says after a notebook went to a competition (it runs as a job). */
export function notebookSentText(c: Pick<ICompetition, 'title' | 'name'>, path: string): string {
  return `Submitted ${path} to ${c.title || c.name}: it runs as a job; its score shows here when it is scored.`;
}

/** The notebook to submit: the open one, else the file browser's selection, when it is one. */
export function notebookPath(current: string | null, selected: string | null): string | null {
  for (const path of [current, selected]) {
    if (path && /\.ipynb$/i.test(path)) {
      return path;
    }
  }
  return null;
}

/** The CSV file to submit: the file browser's selection, when it is one. */
export function predictionsPath(selected: string | null): string | null {
  return selected && /\.csv$/i.test(selected) ? selected : null;
}

export interface ITemplate {
  course: string;
  name: string;
  display_name?: string;
  description?: string;
  /** its newest version the reader may see; `students_see` is false only in the staff's view */
  latest?: { students_see?: boolean } | null;
}

/** A template's line in the panel; the staff read which ones their students do not see yet
 * (published staff only, or an assignment's not open yet: docs/teachers/templates.md). */
export function templateText(t: ITemplate): string {
  const text = `${t.display_name || t.name} (${t.course})`;
  return t.latest?.students_see === false ? `${text}: students do not see it yet` : text;
}

/** One replica of a job, as the service describes it (the generated types). */
export type IJobReplica = NonNullable<JobAnswer['replicas']>[number];

/**
 * A job, as the service answers it (the generated types); the service always sends these four
 * fields (hub_ext.service.jobs.records.as_json), which the document does not mark required.
 */
export type IJob = JobAnswer & Required<Pick<JobAnswer, 'id' | 'name' | 'course' | 'state'>>;

/** Jobs that still hold or wait for resources (a "Cancel" applies to them). */
export const ACTIVE_JOB_STATES = ['queued', 'admitted', 'running', 'preempted'];

/** How a job reads in the panel: "resnet (demo101): queued, 2nd in the queue". */
export function describeJob(job: IJob): string {
  let where = '';
  if (job.state === 'queued' && job.queue_position) {
    const n = job.queue_position;
    const suffix = n % 10 === 1 && n % 100 !== 11 ? 'st' : n % 10 === 2 && n % 100 !== 12 ? 'nd'
      : n % 10 === 3 && n % 100 !== 13 ? 'rd' : 'th';
    where = `, ${n}${suffix} in the queue`;
  }
  return `${job.name} (${job.course}): ${job.state}${where}`;
}

/** Why a waiting job waits, as the panel shows it under the job; null for a job not waiting. */
/** What Cancel did, in plain words (the service answers the job as it is now). */
export function cancelledText(name: string, state: string | undefined): string {
  if (state === 'cancelled') {
    return `Cancelled ${name}: it left the queue and will not start.`;
  }
  return `Stopping ${name}: its programs are asked to stop, and stopped for good after a short grace period.`;
}

/** Times in the one format of the classhub pages: the reader's locale and time zone. */
const TIME_FORMAT = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'short' });
const ISO_TIME = /\b\d{4}-\d\d-\d\dT\d\d:\d\d(?::\d\d(?:\.\d+)?)?(?:Z|[+-]\d\d:\d\d)/g;

/**
 * A sentence with ISO times in it (a waiting job's reason says "estimated start
 * 2026-12-04T14:20Z") with each time as the classhub pages show times.
 */
export function timesIn(text: string, format: Intl.DateTimeFormat = TIME_FORMAT): string {
  return text.replace(ISO_TIME, iso => formatTime(iso, format));
}

/**
 * One ISO time as the classhub pages show it ("Dec 4, 2026, 2:20 PM" for an en-US reader): the
 * panel's assignments and competitions read like the course page. Not a time: the text as is.
 */
export function formatTime(iso: string, format: Intl.DateTimeFormat = TIME_FORMAT): string {
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? String(iso ?? '') : format.format(date);
}

export function waitingText(job: IJob): string | null {
  if ((job.state !== 'queued' && job.state !== 'preempted') || !job.reason) {
    return null;
  }
  return `Waits: ${timesIn(job.reason)}`;
}

/** Whether a job may still change (its log may still grow): the panel and log view poll it. */
export function isActiveJob(job: Pick<IJob, 'state'>): boolean {
  return ACTIVE_JOB_STATES.includes(job.state);
}

/** What a person fills in the "Submit as job…" dialog. */
export interface IJobForm {
  /** the script, relative to the server's root (the home) */
  path: string;
  /** empty: the API picks my only course */
  course?: string;
  replicas: number;
  /** GPUs per replica (0: one CPU core instead) */
  gpus: number;
  /** minutes; empty or 0: the service's default */
  maxRuntimeMinutes?: number | null;
}

/** A job name the API takes (lowercase letters, digits, '-'; at most 63) from a script's path. */
export function jobName(path: string): string {
  const base = path.split('/').pop() || '';
  const stem = base.replace(/\.py$/i, '');
  const slug = stem
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, 63)
    .replace(/-+$/, '');
  return slug || 'job';
}

function wholeIn(value: number, low: number, high: number): boolean {
  return Number.isInteger(value) && value >= low && value <= high;
}

/**
 * The body of ``POST /api/jobs`` for a Python script, or a sentence saying what to change.
 * The job runs in the script's folder (as ``cd lab3 && python train.py`` in a terminal would):
 * ``workdir`` is that folder relative to the home, the command ``["python", "<file name>"]``.
 */
export function jobRequest(form: IJobForm): { body: JobSubmission } | { error: string } {
  const path = (form.path || '').replace(/^\/+/, '');
  if (!/\.py$/i.test(path)) {
    return { error: 'Choose a Python script (a .py file) to submit as a job.' };
  }
  if (path.split('/').includes('..')) {
    return { error: 'The script must be inside your home folder.' };
  }
  if (!wholeIn(form.replicas, 1, 64)) {
    return { error: 'Replicas must be a whole number from 1 to 64.' };
  }
  if (!wholeIn(form.gpus, 0, 64)) {
    return { error: 'GPUs per replica must be a whole number from 0 to 64.' };
  }
  const minutes = form.maxRuntimeMinutes ?? 0;
  if (!Number.isFinite(minutes) || minutes < 0) {
    return { error: 'The maximum runtime must be a number of minutes (empty: the default).' };
  }
  const slash = path.lastIndexOf('/');
  const body: JobSubmission = {
    name: jobName(path),
    command: ['python', path.slice(slash + 1)],
    workdir: slash < 0 ? '' : path.slice(0, slash),
    replicas: form.replicas,
    resources: form.gpus > 0 ? { 'nvidia.com/gpu': form.gpus } : { cpu: '1' }
  };
  if (form.course) {
    body.course = form.course;
  }
  if (minutes > 0) {
    body.max_runtime = Math.round(minutes * 60);
  }
  return { body };
}

/** What ``GET api/classhub/panel/state`` answers. */
export interface IPanelState {
  viewer: IViewer;
  owner: string;
  server: {
    name: string;
    profile?: string | null;
    gpus?: string | null;
    started?: string | null;
  };
  hub_prefix?: string;
  usage?: { usage: IUsage; courses: Record<string, ICourseUsage> };
  templates?: ITemplate[];
  assignments?: IAssignment[];
  competitions?: ICompetition[];
  shares?: IShare[];
  shared_with_me?: IShare[];
  culling?: { warnings: ICullWarning[] };
  courses?: Record<string, string>;
  /** absent when classhub runs without the job service */
  jobs?: IJob[];
  /** the home's size against its limit and the courses' data folders (GET storage/me) */
  storage?: IStorage;
}

/** What ``GET storage/me`` answers: my home's size, its limit, and my courses' data folders. */
export interface IStorage {
  bytes: number | null;
  limit: number | null;
  level: 'fine' | 'near' | 'over';
  warning: string | null;
  courses: { course: string; role: string; path: string; writable: boolean }[];
}

/** Bytes in words (binary units), as the course page writes them. */
export function formatBytes(n: number | null | undefined): string {
  if (n === null || n === undefined) {
    return 'unknown';
  }
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let size = n;
  let unit = 0;
  while (size >= 1024 && unit < units.length - 1) {
    size /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${n} B` : `${size.toFixed(1)} ${units[unit]}`;
}

/** One quota bar: what is used of a limit. */
export interface IBar {
  label: string;
  used: number;
  limit: number;
  /** used / limit, clamped to [0, 1] */
  fraction: number;
  text: string;
}

const SUFFIXES: Record<string, number> = {
  m: 1e-3,
  k: 1e3,
  M: 1e6,
  G: 1e9,
  T: 1e12,
  Ki: 1024,
  Mi: 1024 ** 2,
  Gi: 1024 ** 3,
  Ti: 1024 ** 4
};

/** A Kubernetes quantity ("500m", "4Gi", "2") as a number; NaN when it is not one. */
export function parseQuantity(text: string | number | null | undefined): number {
  if (typeof text === 'number') {
    return text;
  }
  if (typeof text !== 'string') {
    return NaN;
  }
  const match = /^([0-9.]+(?:e[+-]?[0-9]+)?)([a-zA-Z]*)$/.exec(text.trim());
  if (!match) {
    return NaN;
  }
  const value = Number(match[1]);
  if (!match[2]) {
    return value;
  }
  const scale = SUFFIXES[match[2]];
  return scale === undefined ? NaN : value * scale;
}

const LABELS: Record<string, string> = {
  cpu: 'CPU cores',
  memory: 'Memory',
  'nvidia.com/gpu': 'GPUs'
};

function resourceLabel(name: string): string {
  if (LABELS[name]) {
    return LABELS[name];
  }
  const mig = /^nvidia\.com\/mig-(.+)$/.exec(name);
  return mig ? `MIG ${mig[1]} slices` : name;
}

function amount(name: string, value: number): string {
  if (name === 'memory') {
    return `${(value / 1024 ** 3).toFixed(value >= 10 * 1024 ** 3 ? 0 : 1)} GiB`;
  }
  return Number.isInteger(value) ? String(value) : value.toFixed(2);
}

function bar(label: string, used: number, limit: number, text: string): IBar {
  const fraction = limit > 0 ? Math.min(1, Math.max(0, used / limit)) : used > 0 ? 1 : 0;
  return { label, used, limit, fraction, text };
}

/**
 * The bars of one course: each limited resource, servers and GPU-hours this week. A resource
 * without a limit has no bar (there is nothing to fill); a limit of 0 shows as full.
 */
export function quotaBars(course: ICourseUsage): IBar[] {
  const bars: IBar[] = [];
  const used = course.usage.resources || {};
  for (const [name, limitText] of Object.entries(course.limits.resources || {})) {
    const limit = parseQuantity(limitText);
    const have = parseQuantity(used[name] ?? '0');
    if (Number.isNaN(limit)) {
      continue;
    }
    bars.push(
      bar(resourceLabel(name), have, limit, `${amount(name, have)} of ${amount(name, limit)}`)
    );
  }
  if (course.limits.servers !== null && course.limits.servers !== undefined) {
    const n = course.usage.servers;
    bars.push(bar('Servers', n, course.limits.servers, `${n} of ${course.limits.servers}`));
  }
  const gpuHours = course.limits.gpu_hours_per_week;
  if (gpuHours !== null && gpuHours !== undefined) {
    const limit = parseQuantity(gpuHours);
    const have = course.usage.gpu_hours_week;
    bars.push(
      bar('GPU-hours this week', have, limit, `${have.toFixed(1)} of ${amount('', limit)} h`)
    );
  }
  return bars;
}

/** "1 h 05 min", "4 min 10 s", "12 s": a countdown a person reads at a glance. */
export function formatDuration(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const rest = s % 60;
  if (h > 0) {
    return `${h} h ${String(m).padStart(2, '0')} min`;
  }
  if (m > 0) {
    return `${m} min ${String(rest).padStart(2, '0')} s`;
  }
  return `${rest} s`;
}

/** Seconds left until a warning's cull, counted from `now` (the countdown keeps moving). */
export function secondsLeft(warning: ICullWarning, now: Date): number {
  const at = Date.parse(warning.cull_at);
  if (Number.isNaN(at)) {
    return warning.seconds_left;
  }
  return Math.max(0, (at - now.getTime()) / 1000);
}

/** The sentence of a culler warning, as a notification and in "My server". */
export function cullMessage(warning: ICullWarning, now: Date): string {
  const which = warning.server_name ? `Your server "${warning.server_name}"` : 'Your server';
  const why = /maximum age/.test(warning.message)
    ? 'because it reached its maximum running time. Save your work.'
    : 'because it is idle.';
  return `${which} will be stopped in ${formatDuration(secondsLeft(warning, now))} ${why}`;
}

/** The banner over a shared server, or null for the owner. */
export function bannerText(state: Pick<IPanelState, 'viewer' | 'owner'>): string | null {
  if (state.viewer.owner) {
    return null;
  }
  if (state.viewer.access === 'read-only') {
    return `Read-only: shared by ${state.owner}`;
  }
  return `Shared by ${state.owner} (editable)`;
}

/** Whether documents open read-only (no edits, no kernel, no save). */
export function isReadOnly(viewer: IViewer): boolean {
  return !viewer.owner && viewer.access === 'read-only';
}

/** JupyterLab commands that would run, change or save a document. */
const RUNS = /^(notebook:(run|restart|interrupt|shutdown|reconnect|change-kernel|clear)|runmenu:|kernelmenu:|console:create)/;
const CHANGES =
  /^notebook:(cut|delete|insert|merge|split|paste|move-cell|change-cell-to|undo|redo|trust|toggle-render-side-by-side)/;
const SAVES = /^docmanager:(save|rename|delete|duplicate)/;

/**
 * Why a JupyterLab command does nothing in a read-only share (null: it runs as usual).
 *
 * JupyterLab 4 would open "Select Kernel" and then clear the outputs on Shift+Enter in a
 * notebook without a kernel, and offer "Save as" into the owner's server, which refuses it.
 * A read-only viewer gets this sentence instead, with "Copy to my server" beside it.
 */
export function readOnlyRefusal(command: string): string | null {
  if (RUNS.test(command)) {
    return 'Shared read-only: it does not run here. Copy it to your server to run it.';
  }
  if (SAVES.test(command)) {
    return 'Shared read-only: nothing is saved here. Copy it to your server to keep your own version.';
  }
  if (CHANGES.test(command)) {
    return 'Shared read-only: cells cannot be changed here. Copy it to your server to edit it.';
  }
  return null;
}

/** What a person fills in the share dialog. */
export interface IShareForm {
  kind: 'read-only' | 'edit';
  with: 'user' | 'course' | 'link';
  user?: string;
  course?: string;
  /** minutes until the share ends; empty or 0: never (links must expire) */
  minutes?: number | null;
  /** the notebook or folder, relative to the server's root; empty: the whole server */
  path?: string;
}

/** The body of ``POST /api/shares``, or a sentence saying what to change. */
export function shareRequest(form: IShareForm): { body: ShareRequest } | { error: string } {
  const body: ShareRequest = { kind: form.kind };
  if (form.kind !== 'read-only' && form.kind !== 'edit') {
    return { error: 'Choose read-only or editable.' };
  }
  if (form.with === 'user') {
    const user = (form.user || '').trim();
    if (!user) {
      return { error: 'Type the user name of the person to share with.' };
    }
    body.user = user;
  } else if (form.with === 'course') {
    if (!form.course) {
      return { error: 'You are in no course to share with.' };
    }
    body.group = form.course;
  } else {
    body.link = true;
  }
  const minutes = form.minutes ?? 0;
  if (!Number.isFinite(minutes) || minutes < 0 || !Number.isInteger(minutes)) {
    return { error: 'The expiry must be a whole number of minutes (0: never).' };
  }
  if (minutes > 0) {
    body.minutes = minutes;
  } else if (form.with === 'link') {
    return { error: 'A link must expire: give it a number of minutes.' };
  }
  const path = (form.path || '').replace(/^\/+/, '');
  if (path) {
    body.path = path;
  }
  return { body };
}

/** How a share reads in a list: "read-only · week1.ipynb · with ta1 · until 14:30". */
export function describeShare(share: IShare, mine: boolean): string {
  const kind = share.kind === 'edit' ? 'editable' : 'read-only';
  const what = share.path || 'whole server';
  let who: string;
  if (!mine) {
    who = `from ${share.owner}`;
  } else if (share.target_kind === 'link') {
    who = 'by link';
  } else if (share.target_kind === 'group') {
    who = `with course ${share.target}`;
  } else {
    who = `with ${share.target}`;
  }
  const until = share.expires_at ? ` · until ${share.expires_at.slice(11, 16)} UTC` : '';
  return `${kind} · ${what} · ${who}${until}`;
}
