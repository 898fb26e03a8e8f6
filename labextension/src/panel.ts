/**
 * The "classhub" sidebar: My server, Quota, Templates, Sharing, Course.
 *
 * Plain DOM in a Lumino widget: every control is a real <button> or <a> (keyboard reachable,
 * labelled), colours come from JupyterLab's theme variables (light and dark themes).
 */
import { Widget } from '@lumino/widgets';

import {
  ACTIVE_JOB_STATES,
  IAssignment,
  ICompetition,
  IJob,
  IPanelState,
  IShare,
  ITemplate,
  assignmentPageUrl,
  assignmentScore,
  cullMessage,
  describeAssignment,
  describeCompetition,
  describeJob,
  describeShare,
  formatBytes,
  formatDuration,
  formatTime,
  quotaBars,
  secondsLeft,
  templateText,
  waitingText
} from './state';

/** What the panel's buttons do; index.ts wires them to commands. */
export interface IPanelActions {
  share(): void;
  keepRunning(): Promise<void>;
  revoke(share: IShare): Promise<void>;
  startTemplate(template: ITemplate): Promise<void>;
  startAssignment(assignment: IAssignment): void;
  submitAssignment(assignment: IAssignment): Promise<void>;
  submitPredictions(competition: ICompetition): Promise<void>;
  submitNotebook(competition: ICompetition): Promise<void>;
  publishFolder(course: string): Promise<void>;
  copyToMyServer(): Promise<void>;
  cancelJob(job: IJob): Promise<void>;
  showLogs(job: IJob): void;
  refresh(): Promise<void>;
}

function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, string> = {},
  ...children: (Node | string)[]
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === 'class') {
      node.className = value;
    } else {
      node.setAttribute(key, value);
    }
  }
  for (const child of children) {
    node.append(child);
  }
  return node;
}

function button(label: string, onClick: () => unknown, aria?: string): HTMLButtonElement {
  const b = el('button', { class: 'jp-Button jp-mod-styled classhub-button', type: 'button' }, label);
  if (aria) {
    b.setAttribute('aria-label', aria);
  }
  b.addEventListener('click', () => {
    void onClick();
  });
  return b;
}

/** A list the server sent, whether bare or wrapped as ``{"shares": [...]}``. */
function asList(value: unknown): IShare[] {
  if (Array.isArray(value)) {
    return value;
  }
  const inner = value && (value as { shares?: unknown }).shares;
  return Array.isArray(inner) ? inner : [];
}

function section(title: string, id: string): HTMLElement {
  const s = el('section', { class: 'classhub-section', 'aria-labelledby': `classhub-${id}` });
  s.append(el('h3', { id: `classhub-${id}` }, title));
  return s;
}

export class ClasshubPanel extends Widget {
  constructor(private actions: IPanelActions) {
    super();
    this.id = 'classhub-panel';
    this.addClass('classhub-panel');
    this.title.caption = 'classhub';
    this.node.setAttribute('role', 'region');
    this.node.setAttribute('aria-label', 'classhub');
    this.node.tabIndex = -1;
    this._timer = window.setInterval(() => this._tick(), 1000);
  }

  get state(): IPanelState | null {
    return this._state;
  }

  dispose(): void {
    window.clearInterval(this._timer);
    super.dispose();
  }

  /** Show a new state (or an error sentence when it could not be read). */
  render(state: IPanelState | null, error?: string): void {
    this._state = state;
    const root = el('div', { class: 'classhub-body' });
    root.append(el('h2', { class: 'classhub-title' }, 'classhub'));
    if (error) {
      root.append(el('p', { class: 'classhub-error', role: 'alert' }, error));
    }
    if (state && !state.viewer.owner) {
      root.append(this._visitor(state));
    } else if (state) {
      root.append(this._myServer(state), this._quota(state), this._templates(state),
        this._assignments(state), this._competitions(state));
      root.append(this._sharing(state), ...this._jobs(state), ...this._courses(state));
      for (const e of (state as any).errors || []) {
        root.append(el('p', { class: 'classhub-error' }, String(e)));
      }
    }
    this.node.replaceChildren(root);
    this._tick();
  }

  private _visitor(state: IPanelState): HTMLElement {
    const s = section('Shared server', 'shared');
    const how = state.viewer.access === 'read-only' ? 'read-only' : 'editable';
    s.append(
      el('p', {}, `You are looking at ${state.owner}'s server (${how}).`),
      el('p', {}, 'Quota, templates and sharing are in the panel of your own server.')
    );
    if (state.viewer.access === 'read-only') {
      s.append(button('Copy to my server', () => this.actions.copyToMyServer()));
    }
    const mine = `${(state.hub_prefix || '/hub/').replace(/hub\/$/, '')}user/${encodeURIComponent(
      state.viewer.name
    )}/lab`;
    s.append(el('p', {}, el('a', { href: mine, target: '_blank', rel: 'noopener' }, 'Open my own server')));
    return s;
  }

  private _myServer(state: IPanelState): HTMLElement {
    const s = section('My server', 'server');
    const dl = el('dl', { class: 'classhub-facts' });
    const fact = (k: string, v: string | Node) => dl.append(el('dt', {}, k), el('dd', {}, v));
    fact('Profile', state.server.profile || 'default');
    fact('GPU', state.server.gpus ? `device ${state.server.gpus}` : 'none');
    fact('Running for', el('span', { 'data-classhub-since': state.server.started || '' }, '…'));
    const storage = state.storage;
    if (storage && storage.bytes !== null) {
      const limit = storage.limit ? ` of ${formatBytes(storage.limit)}` : '';
      fact('Home', `${formatBytes(storage.bytes)}${limit}`);
    }
    s.append(dl);
    if (storage?.warning) {
      s.append(el('div', { class: 'classhub-warning classhub-home-warning', role: 'status' }, storage.warning));
    }
    for (const c of storage?.courses || []) {
      const how = c.writable ? 'you may change it' : 'read-only';
      s.append(
        el('p', { class: 'classhub-course-data' }, `Data of ${c.course}: `, el('code', {}, c.path), ` (${how})`)
      );
    }
    const warnings = state.culling?.warnings || [];
    for (const w of warnings) {
      const box = el('div', { class: 'classhub-warning', role: 'status' });
      box.append(el('p', { 'data-classhub-cull': w.cull_at, 'data-classhub-message': w.message }, cullMessage(w, new Date())));
      box.append(button('Keep running', () => this.actions.keepRunning(), 'Keep my server running'));
      s.append(box);
    }
    const hub = state.hub_prefix || '/hub/';
    s.append(
      el(
        'p',
        { class: 'classhub-links' },
        el('a', { href: `${hub}home`, target: '_blank', rel: 'noopener' }, 'Stop now or change profile'),
        ' (on the hub\'s home page)'
      )
    );
    return s;
  }

  private _quota(state: IPanelState): HTMLElement {
    const s = section('Quota', 'quota');
    const courses = Object.entries(state.usage?.courses || {});
    if (!courses.length) {
      s.append(el('p', {}, 'You are in no course: no course quota applies.'));
    }
    for (const [course, usage] of courses) {
      s.append(el('h4', {}, course));
      const bars = quotaBars(usage);
      if (!bars.length) {
        s.append(el('p', {}, 'No limits set.'));
      }
      for (const b of bars) {
        const row = el('div', { class: 'classhub-bar' });
        const label = `${course}: ${b.label}`;
        row.append(el('span', { class: 'classhub-bar-label' }, `${b.label}: ${b.text}`));
        const meter = el('progress', {
          max: '1',
          value: String(b.fraction),
          'aria-label': `${label}, ${b.text}`
        });
        if (b.fraction >= 0.9) {
          meter.classList.add('classhub-full');
        }
        row.append(meter);
        s.append(row);
      }
    }
    return s;
  }

  private _templates(state: IPanelState): HTMLElement {
    const s = section('Templates', 'templates');
    const templates = state.templates || [];
    if (!templates.length) {
      s.append(el('p', {}, 'No templates in your courses yet.'));
    }
    const list = el('ul', { class: 'classhub-list' });
    for (const t of templates) {
      const name = t.display_name || t.name;
      list.append(
        el(
          'li',
          {},
          el('span', {}, templateText(t)),
          button('Start', () => this.actions.startTemplate(t), `Start or re-seed from ${name}`)
        )
      );
    }
    s.append(list);
    for (const [course, role] of Object.entries(state.courses || {})) {
      if (role === 'teacher') {
        s.append(
          button(`Publish this folder to ${course}`, () => this.actions.publishFolder(course))
        );
      }
    }
    return s;
  }

  private _assignments(state: IPanelState): HTMLElement {
    const s = section('Assignments', 'assignments');
    const assignments = state.assignments || [];
    if (!assignments.length) {
      s.append(el('p', {}, 'No open assignments in your courses.'));
    }
    const list = el('ul', { class: 'classhub-list classhub-assignments' });
    for (const a of assignments) {
      const name = a.title || a.name;
      const submit = button(
        a.late_now ? 'Submit (late)' : 'Submit',
        () => this.actions.submitAssignment(a),
        `Submit the folder ${a.folder} for ${name}`
      );
      if (!a.accepting) {
        submit.setAttribute('disabled', '');
        submit.title = 'Not accepting submissions now';
      }
      const item = el(
        'li',
        { 'data-assignment': `${a.course}/${a.name}` },
        el('span', {}, describeAssignment(a, formatTime)),
        button('Start', () => this.actions.startAssignment(a), `Start ${name}: its files in ${a.folder}`),
        submit
      );
      const score = assignmentScore(a);
      if (score) {
        // my score here; each cell's result and message on the course page
        item.append(
          el(
            'p',
            { class: 'classhub-assignment-score' },
            el('strong', {}, score),
            ' · ',
            el(
              'a',
              { href: assignmentPageUrl(state.hub_prefix, a), target: '_blank', rel: 'noopener' },
              'Feedback'
            )
          )
        );
      }
      list.append(item);
    }
    s.append(list);
    return s;
  }

  private _competitions(state: IPanelState): HTMLElement {
    const s = section('Competitions', 'competitions');
    const competitions = state.competitions || [];
    if (!competitions.length) {
      s.append(el('p', {}, 'No open competitions in your courses.'));
    }
    const list = el('ul', { class: 'classhub-list classhub-competitions' });
    for (const c of competitions) {
      const submit = button(
        'Submit…',
        () => this.actions.submitPredictions(c),
        `Submit a predictions CSV to ${c.title || c.name}: the file selected in the file browser, or a path`
      );
      if (!c.accepting || !c.left_today) {
        submit.setAttribute('disabled', '');
        submit.title = c.accepting ? 'No submissions left today (UTC)' : 'Not accepting submissions now';
      }
      const item = el('li', { 'data-competition': c.name }, el('span', {}, describeCompetition(c, formatTime)), submit);
      if (c.takes_notebooks) {
        const notebook = button(
          'Submit notebook',
          () => this.actions.submitNotebook(c),
          `Run the open notebook as a job for ${c.title || c.name}: it must write ${c.predictions_file}`
        );
        if (submit.hasAttribute('disabled')) {
          notebook.setAttribute('disabled', '');
          notebook.title = submit.title;
        }
        item.append(notebook);
      }
      list.append(item);
    }
    s.append(list);
    return s;
  }

  private _sharing(state: IPanelState): HTMLElement {
    const s = section('Sharing', 'sharing');
    s.append(button('Share…', () => this.actions.share(), 'Share the current notebook or folder'));
    s.append(el('h4', {}, 'My shares'));
    const mine = asList(state.shares).filter(x => x.active !== false);
    const list = el('ul', { class: 'classhub-list classhub-my-shares' });
    for (const x of mine) {
      list.append(
        el(
          'li',
          {},
          el('span', {}, describeShare(x, true)),
          button('Revoke', () => this.actions.revoke(x), `Revoke: ${describeShare(x, true)}`)
        )
      );
    }
    s.append(mine.length ? list : el('p', {}, 'None.'));
    s.append(el('h4', {}, 'Shared with me'));
    const theirs = asList(state.shared_with_me).filter(x => x.active !== false);
    const with_me = el('ul', { class: 'classhub-list classhub-shared-with-me' });
    for (const x of theirs) {
      const label = `${x.path || 'server'} from ${x.owner}`;
      with_me.append(
        el(
          'li',
          {},
          el(
            'a',
            { href: x.open_url || '#', target: '_blank', rel: 'noopener', title: describeShare(x, false) },
            label
          )
        )
      );
    }
    s.append(theirs.length ? with_me : el('p', {}, 'Nothing yet.'));
    return s;
  }

  private _jobs(state: IPanelState): HTMLElement[] {
    if (!state.jobs) {
      return [];
    }
    const s = section('Jobs', 'jobs');
    const list = el('ul', { class: 'classhub-list classhub-jobs' });
    for (const job of state.jobs) {
      const what = el('div', { class: 'classhub-job-what' }, el('span', {}, describeJob(job)));
      const waiting = waitingText(job);
      if (waiting) {
        what.append(el('p', { class: 'classhub-job-reason' }, waiting));
      }
      const item = el('li', { 'data-classhub-job': job.id }, what);
      const actions = el('span', { class: 'classhub-job-actions' });
      actions.append(button('Logs', () => this.actions.showLogs(job), `Logs of job ${job.name}`));
      if (ACTIVE_JOB_STATES.includes(job.state)) {
        actions.append(button('Cancel', () => this.actions.cancelJob(job), `Cancel job ${job.name}`));
      }
      item.append(actions);
      list.append(item);
    }
    s.append(
      state.jobs.length
        ? list
        : el(
            'p',
            {},
            'No jobs. Right-click a .py file in the file browser and choose "Submit as job…", ' +
              'or run "classhub job submit" in a terminal.'
          )
    );
    return [s];
  }

  /** New jobs (from the jobs poll): only the Jobs section is drawn again (focus stays put). */
  updateJobs(jobs: IJob[]): void {
    if (!this._state || !this._state.jobs) {
      return;
    }
    this._state = { ...this._state, jobs };
    const old = this.node.querySelector("section[aria-labelledby='classhub-jobs']");
    const [fresh] = this._jobs(this._state);
    if (old && fresh) {
      old.replaceWith(fresh);
    }
  }

  private _courses(state: IPanelState): HTMLElement[] {
    const out: HTMLElement[] = [];
    for (const [course, role] of Object.entries(state.courses || {})) {
      if (role !== 'teacher' && role !== 'ta') {
        continue;
      }
      const s = section(`Course ${course}`, `course-${course}`);
      s.append(
        el(
          'p',
          {},
          el(
            'a',
            {
              href: `${(state.hub_prefix || '/hub/').replace(/hub\/$/, '')}services/classhub/courses/${encodeURIComponent(course)}`,
              target: '_blank',
              rel: 'noopener'
            },
            `${course}: course page, students and their servers`
          )
        )
      );
      out.push(s);
    }
    return out;
  }

  private _tick(): void {
    const now = new Date();
    this.node.querySelectorAll<HTMLElement>('[data-classhub-since]').forEach(node => {
      const since = Date.parse(node.dataset.classhubSince || '');
      node.textContent = Number.isNaN(since) ? 'unknown' : formatDuration((now.getTime() - since) / 1000);
    });
    this.node.querySelectorAll<HTMLElement>('[data-classhub-cull]').forEach(node => {
      const warning = {
        server_name: '',
        cull_at: node.dataset.classhubCull || '',
        seconds_left: 0,
        message: node.dataset.classhubMessage || ''
      };
      node.textContent = cullMessage(warning, now);
      if (secondsLeft(warning, now) <= 0) {
        node.textContent += ' (now)';
      }
    });
  }

  private _state: IPanelState | null = null;
  private _timer: number;
}
