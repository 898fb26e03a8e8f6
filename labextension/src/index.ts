/**
 * classhub in JupyterLab: the "classhub" sidebar, "Share…" where people look for it, culler
 * warnings as notifications, and read-only shares that open read-only.
 *
 * Everything goes through this server's classhub endpoints (hub_ext.singleuser.panel), which
 * act as the person looking: the owner's panel acts for the owner; a visitor's panel only shows
 * whose server it is and offers "Copy to my server".
 */
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import {
  Dialog,
  ICommandPalette,
  InputDialog,
  MainAreaWidget,
  Notification,
  ToolbarButton,
  showDialog
} from '@jupyterlab/apputils';
import { PageConfig } from '@jupyterlab/coreutils';
import { DocumentRegistry, DocumentWidget } from '@jupyterlab/docregistry';
import { IFileBrowserFactory } from '@jupyterlab/filebrowser';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { LabIcon } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

import { ClasshubError, panelRequest, serviceRequest } from './api';
import { JobForm } from './jobform';
import { JobLogView } from './joblog';
import { ClasshubPanel } from './panel';
import { ShareForm } from './shareform';
import {
  IAssignment,
  ICompetition,
  ICullWarning,
  IJob,
  IPanelState,
  IShare,
  ITemplate,
  bannerText,
  cancelledText,
  cullMessage,
  describeJob,
  isActiveJob,
  isReadOnly,
  jobRequest,
  notebookPath,
  notebookSentText,
  predictionsPath,
  readOnlyRefusal,
  scoredText,
  shareRequest
} from './state';

const PLUGIN_ID = 'classhub-jupyterlab:plugin';
/** How often the owner's panel asks for pending cull warnings (ms). */
const CULL_POLL_MS = 10_000;
/** How often the Jobs section is read again while one of my jobs is active (ms). */
const JOBS_POLL_MS = 5_000;
/** JupyterLab cuts a notification's message at 140 characters. */
const NOTIFICATION_CHARS = 140;

namespace CommandIDs {
  export const open = 'classhub:open-panel';
  export const refresh = 'classhub:refresh';
  export const share = 'classhub:share';
  export const keep = 'classhub:keep-running';
  export const copy = 'classhub:copy-to-my-server';
  export const publish = 'classhub:publish-folder';
  export const submitJob = 'classhub:submit-job';
}

const icon = new LabIcon({
  name: 'classhub:icon',
  svgstr:
    '<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">' +
    '<path class="jp-icon3" fill="#616161" d="M12 3 1 9l11 6 9-4.9V17h2V9L12 3zm-7 9.2v4L12 20l7-3.8v-4L12 16l-7-3.8z"/></svg>'
});

function errorText(error: unknown): string {
  return error instanceof ClasshubError ? error.message : String(error);
}

function fail(what: string, error: unknown): void {
  const message = `${what}: ${errorText(error)}`;
  // a refusal's sentence says what to change: never lose its end to the notification's cut
  const actions =
    message.length > NOTIFICATION_CHARS
      ? [
          {
            label: 'Read all',
            callback: () =>
              void showDialog({ title: what, body: message, buttons: [Dialog.okButton()] })
          }
        ]
      : [];
  Notification.error(message, { autoClose: false, actions });
}

/** The banner over a document of a shared server (and its "Copy to my server" button). */
class ShareBanner extends Widget {
  constructor(text: string, onCopy: (() => void) | null) {
    super();
    this.addClass('classhub-banner');
    this.node.setAttribute('role', 'status');
    const span = document.createElement('span');
    span.textContent = onCopy ? `${text} — ` : text;
    this.node.append(span);
    if (onCopy) {
      const b = document.createElement('button');
      b.type = 'button';
      b.className = 'jp-Button jp-mod-styled jp-mod-accept classhub-copy';
      b.textContent = 'Copy to my server';
      b.addEventListener('click', onCopy);
      this.node.append(b);
    }
  }
}

async function readState(parts = ''): Promise<IPanelState | null> {
  try {
    return await panelRequest<IPanelState>(parts ? `state?parts=${parts}` : 'state');
  } catch (error) {
    console.warn('classhub: the panel state could not be read', error);
    return null;
  }
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'classhub: the course panel, sharing, culler warnings, read-only shares',
  autoStart: true,
  optional: [ICommandPalette, IFileBrowserFactory, INotebookTracker],
  activate: async (
    app: JupyterFrontEnd,
    palette: ICommandPalette | null,
    browsers: IFileBrowserFactory | null,
    notebooks: INotebookTracker | null
  ): Promise<void> => {
    // Read who looks before documents open: a read-only visitor's documents must never try to
    // start a kernel (JupyterLab asks the registry for the kernel preference when opening one).
    const first = await readState('viewer');
    const readOnly = !!first && isReadOnly(first.viewer);
    if (readOnly) {
      const original = app.docRegistry.getKernelPreference.bind(app.docRegistry);
      app.docRegistry.getKernelPreference = (path, widgetName, kernel) => {
        const preference = original(path, widgetName, kernel);
        return preference
          ? { ...preference, shouldStart: false, canStart: false, autoStartDefault: false }
          : preference;
      };
    }

    const panel = new ClasshubPanel({
      share: () => void app.commands.execute(CommandIDs.share),
      keepRunning: () => app.commands.execute(CommandIDs.keep) as Promise<void>,
      revoke: (share: IShare) => revoke(share),
      startTemplate: (template: ITemplate) => startTemplate(template),
      // starting restarts this server: the course page does it (and follows the start)
      startAssignment: (a: IAssignment) => {
        const root = (panel.state?.hub_prefix || '/hub/').replace(/hub\/$/, '');
        window.open(`${root}services/classhub/courses/${encodeURIComponent(a.course)}#assignments`, '_blank');
      },
      submitAssignment: async (a: IAssignment) => {
        try {
          const s = await serviceRequest<{ files: number; late: boolean; skipped: string[] }>(
            `courses/${encodeURIComponent(a.course)}/assignments/${encodeURIComponent(a.name)}/submissions`,
            'POST',
            {}
          );
          const left = s.skipped.length ? ` Not submitted: ${s.skipped.join(', ')}.` : '';
          Notification.success(
            `Submitted ${a.title || a.name}: ${s.files} files${s.late ? ' (late)' : ''}.${left}`,
            { autoClose: 8000 }
          );
        } catch (error) {
          fail('Not submitted', error);
        }
        await refresh();
      },
      submitPredictions: async (c: ICompetition) => {
        let path = predictionsPath(browserSelection());
        if (!path) {
          const asked = await InputDialog.getText({
            title: `Submit predictions to ${c.title || c.name}`,
            label: 'The CSV file (a path in this server), or select it in the file browser first',
            placeholder: 'predictions.csv',
            okLabel: 'Submit'
          });
          if (!asked.button.accept || !asked.value?.trim()) {
            return;
          }
          path = asked.value.trim();
        }
        try {
          const s = await panelRequest<{ public_score: number | null }>('predictions', {
            method: 'POST',
            body: JSON.stringify({ course: c.course, competition: c.name, path }),
            headers: { 'Content-Type': 'application/json' }
          });
          Notification.success(scoredText(c, s.public_score), { autoClose: 8000 });
        } catch (error) {
          fail('Not submitted', error);
        }
        await refresh();
      },
      submitNotebook: async (c: ICompetition) => {
        let path = notebookPath(currentDocumentPath(), browserSelection());
        if (!path) {
          const asked = await InputDialog.getText({
            title: `Submit a notebook to ${c.title || c.name}`,
            label: `The notebook (a path in this server) that writes ${c.predictions_file}; or open it first`,
            placeholder: 'model.ipynb',
            okLabel: 'Submit'
          });
          if (!asked.button.accept || !asked.value?.trim()) {
            return;
          }
          path = asked.value.trim();
        }
        const open = app.shell.currentWidget;
        if (open instanceof DocumentWidget && open.context.path === path && open.context.model.dirty) {
          await open.context.save(); // what runs is what the student sees
        }
        try {
          await panelRequest<{ state: string }>('predictions', {
            method: 'POST',
            body: JSON.stringify({ course: c.course, competition: c.name, path }),
            headers: { 'Content-Type': 'application/json' }
          });
          Notification.success(notebookSentText(c, path), { autoClose: 8000 });
        } catch (error) {
          fail('Not submitted', error);
        }
        await refresh();
      },
      publishFolder: (course: string) =>
        app.commands.execute(CommandIDs.publish, { course }) as Promise<void>,
      copyToMyServer: () => app.commands.execute(CommandIDs.copy) as Promise<void>,
      cancelJob: async (job: IJob) => {
        try {
          const after = await serviceRequest<IJob>(`jobs/${encodeURIComponent(job.id)}/cancel`, 'POST', {});
          Notification.success(cancelledText(job.name, after?.state), { autoClose: 8000 });
        } catch (error) {
          fail('Not cancelled', error);
        }
        await refresh();
      },
      showLogs: (job: IJob) => showLogs(job),
      refresh: () => refresh()
    });
    panel.title.icon = icon;
    app.shell.add(panel, 'left', { rank: 850 });
    // A tree URL (the classhub Starting page opens /lab/tree/<the template's folder>) shows the
    // file browser at that folder, even when the restored layout had this panel in front.
    if (!readOnly && PageConfig.getOption('treePath')) {
      void app.restored.then(() => app.shell.activateById('filebrowser'));
    }
    if (!first) {
      panel.render(null, 'classhub could not be reached from this server.');
    } else if (first.viewer.owner) {
      panel.render(null);
      void refresh(); // the owner's courses, quota, templates and shares: not worth waiting for
    } else {
      panel.render(first);
    }

    async function refresh(): Promise<void> {
      const state = await readState();
      panel.render(state, state ? undefined : 'classhub could not be reached from this server.');
      if (state) {
        showCullWarnings(state.culling?.warnings || []);
      }
    }

    // -- where documents are: the current one, or the file browser's ------------------------------
    function currentDocumentPath(): string | null {
      const widget = app.shell.currentWidget;
      if (widget instanceof DocumentWidget) {
        return widget.context.path;
      }
      return null;
    }

    function browserSelection(): string | null {
      const browser = browsers?.tracker.currentWidget;
      if (!browser) {
        return null;
      }
      const first = browser.selectedItems().next();
      return first && !first.done && first.value ? first.value.path : null;
    }

    function browserFolder(): string {
      return browsers?.tracker.currentWidget?.model.path ?? '';
    }

    /** A form dialog whose values become a request body, or null: cancelled, or refused by
     *  `toRequest` (its sentence shown as a notification). */
    async function askFor<V, B>(
      title: string,
      form: Widget & { getValue(): V },
      okLabel: string,
      focus: string,
      toRequest: (value: V) => { body: B } | { error: string }
    ): Promise<{ body: B } | null> {
      const result = await showDialog({
        title,
        body: form,
        buttons: [Dialog.cancelButton(), Dialog.okButton({ label: okLabel })],
        focusNodeSelector: focus
      });
      if (!result.button.accept || !result.value) {
        return null;
      }
      const request = toRequest(result.value);
      if ('error' in request) {
        Notification.error(request.error, { autoClose: 8000 });
        return null;
      }
      return request;
    }

    // -- sharing --------------------------------------------------------------------------------
    async function share(path: string): Promise<void> {
      const courses = Object.keys(panel.state?.courses || {});
      const request = await askFor('Share', new ShareForm(path, courses), 'Share', 'input[name=user]', shareRequest);
      if (!request) {
        return;
      }
      try {
        const made = await serviceRequest<IShare & { open_url?: string }>(
          'shares',
          'POST',
          request.body
        );
        const link = made.target_kind === 'link' && made.open_url
          ? new URL(made.open_url, window.location.origin).href
          : null;
        Notification.success(
          link ? `Shared by link: ${link}` : `Shared ${path || 'your server'} with ${made.target}.`,
          {
            autoClose: link ? false : 6000,
            actions: link
              ? [{ label: 'Copy link', callback: () => void navigator.clipboard?.writeText(link) }]
              : []
          }
        );
      } catch (error) {
        fail('Not shared', error);
      }
      await refresh();
    }

    async function revoke(share: IShare): Promise<void> {
      try {
        await serviceRequest(`shares/${share.id}`, 'DELETE');
        Notification.success('Share revoked.', { autoClose: 4000 });
      } catch (error) {
        fail('Not revoked', error);
      }
      await refresh();
    }

    // -- jobs -----------------------------------------------------------------------------------
    async function submitJob(path: string): Promise<void> {
      const courses = Object.keys(panel.state?.courses || {});
      const request = await askFor('Submit as job', new JobForm(path, courses), 'Submit', 'input[name=replicas]', jobRequest);
      if (!request) {
        return;
      }
      let job: IJob;
      try {
        job = await serviceRequest<IJob>('jobs', 'POST', request.body);
      } catch (error) {
        fail('Not submitted', error);
        return;
      }
      const id = Notification.success(`Submitted ${describeJob(job)}.`, {
        autoClose: 10_000,
        actions: [{ label: 'Logs', callback: () => showLogs(job) }]
      });
      await refresh();
      // the admission loop gives the job its place within a cycle or two: say it when known
      for (let i = 0; i < 10 && job.state === 'queued' && !job.queue_position; i++) {
        await new Promise(resolve => window.setTimeout(resolve, 1000));
        try {
          job = await serviceRequest<IJob>(`jobs/${encodeURIComponent(job.id)}`);
        } catch {
          break;
        }
      }
      Notification.update({
        id,
        message: `Submitted ${describeJob(job)}.`,
        type: 'success',
        autoClose: 10_000,
        actions: [{ label: 'Logs', callback: () => showLogs(job) }]
      });
      await refresh();
    }

    const logViews = new Map<string, MainAreaWidget<JobLogView>>();
    function showLogs(job: IJob): void {
      let view = logViews.get(job.id);
      if (!view || view.isDisposed) {
        view = new MainAreaWidget({ content: new JobLogView(job) });
        view.id = `classhub-job-log-${job.id}`;
        view.title.label = `Log: ${job.name}`;
        view.title.caption = `The log of job ${job.name} (${job.id})`;
        view.title.icon = icon;
        view.title.closable = true;
        logViews.set(job.id, view);
        app.shell.add(view, 'main');
      }
      app.shell.activateById(view.id);
    }

    function isScript(path: string | null): path is string {
      return !!path && /\.py$/i.test(path);
    }

    // -- templates ------------------------------------------------------------------------------
    /**
     * Start (or re-seed) from a template: the classhub "Starting <template>" page asks before it
     * restarts this server, follows the start and opens JupyterLab at the template's folder.
     */
    async function startTemplate(template: ITemplate): Promise<void> {
      const root = (panel.state?.hub_prefix || '/hub/').replace(/hub\/$/, '');
      window.location.href =
        `${root}services/classhub/templates/${encodeURIComponent(template.course)}/` +
        `${encodeURIComponent(template.name)}/start`;
    }

    // -- commands -------------------------------------------------------------------------------
    app.commands.addCommand(CommandIDs.open, {
      label: 'Open the classhub panel',
      caption: 'My server, quota, templates and sharing',
      icon,
      execute: () => app.shell.activateById(panel.id)
    });
    app.commands.addCommand(CommandIDs.refresh, {
      label: 'classhub: Refresh the panel',
      execute: () => refresh()
    });
    app.commands.addCommand(CommandIDs.share, {
      label: args => (args.from === 'filebrowser' ? 'Share…' : 'classhub: Share…'),
      caption: 'Share this notebook or folder: read-only or editable, with a person, your course or a link',
      icon,
      isVisible: () => !readOnly && (panel.state?.viewer.owner ?? true),
      execute: async args => {
        const path =
          (args.path as string | undefined) ??
          (args.from === 'filebrowser' ? browserSelection() : null) ??
          currentDocumentPath() ??
          browserFolder();
        await share(path ?? '');
      }
    });
    app.commands.addCommand(CommandIDs.keep, {
      label: 'classhub: Keep my server running',
      execute: async () => {
        try {
          await panelRequest('keep', { method: 'POST' });
          for (const [key, id] of shown) {
            Notification.dismiss(id); // the warnings it answers: the culler drops them next cycle
            answered.add(key);
          }
          shown.clear();
          Notification.success('Your server keeps running.', { autoClose: 5000 });
        } catch (error) {
          fail('Could not keep the server running', error);
        }
        await refresh();
      }
    });
    app.commands.addCommand(CommandIDs.copy, {
      label: 'classhub: Copy to my server',
      caption: 'An editable copy of this file in your own server',
      isEnabled: () => !!first && !first.viewer.owner,
      execute: async args => {
        const path = (args.path as string | undefined) ?? currentDocumentPath() ?? browserSelection();
        if (!path) {
          Notification.info('Open the notebook or file to copy first.', { autoClose: 5000 });
          return;
        }
        try {
          const copy = await panelRequest<{ path: string; url: string }>('copy', {
            method: 'POST',
            body: JSON.stringify({ path })
          });
          Notification.success(`Copied to your server as ${copy.path}.`, {
            autoClose: false,
            actions: [
              {
                label: 'Open my copy',
                callback: () => void window.open(copy.url, '_blank', 'noopener')
              }
            ]
          });
        } catch (error) {
          fail('Not copied', error);
        }
      }
    });
    app.commands.addCommand(CommandIDs.publish, {
      label: 'classhub: Publish this folder as a template',
      isVisible: () => Object.values(panel.state?.courses || {}).includes('teacher'),
      execute: async args => {
        const teaching = Object.entries(panel.state?.courses || {})
          .filter(([, role]) => role === 'teacher')
          .map(([course]) => course);
        const course = (args.course as string | undefined) ?? teaching[0];
        if (!course) {
          return;
        }
        const folder = browserFolder();
        const landing = folder.split('/').pop() || '';
        const name = await InputDialog.getText({
          title: `Publish ${folder || 'the whole server'} to ${course}`,
          label: 'Template name (letters, digits, -)',
          placeholder: 'lab1'
        });
        if (!name.button.accept || !name.value) {
          return;
        }
        try {
          await serviceRequest(
            `courses/${encodeURIComponent(course)}/templates/${encodeURIComponent(name.value)}/versions`,
            'POST',
            // a folder picked as lab1 lands as lab1/ in each home (docs/templates.md)
            { source: { server_path: folder }, home_folder: landing }
          );
          Notification.success(
            `Published ${folder || 'your server'} as ${name.value}: its files land in ` +
              `${landing ? `${landing}/` : 'the top'} of each home.`,
            { autoClose: 6000 }
          );
        } catch (error) {
          fail('Not published', error);
        }
        await refresh();
      }
    });
    app.commands.addCommand(CommandIDs.submitJob, {
      label: args => (args.from === 'filebrowser' ? 'Submit as job…' : 'classhub: Submit as job…'),
      caption: 'Run this Python script as a job: replicas, GPUs, a maximum runtime',
      icon,
      isVisible: () =>
        !readOnly && (panel.state ? panel.state.viewer.owner && !!panel.state.jobs : true),
      execute: async args => {
        const path =
          (args.path as string | undefined) ??
          (args.from === 'filebrowser'
            ? browserSelection()
            : [currentDocumentPath(), browserSelection()].find(isScript) ?? null);
        if (!isScript(path)) {
          Notification.info('Open a Python script, or select one in the file browser, first.', {
            autoClose: 6000
          });
          return;
        }
        await submitJob(path);
      }
    });
    if (palette) {
      for (const command of Object.values(CommandIDs)) {
        palette.addItem({ command, category: 'classhub' });
      }
    }

    // -- where people already look ------------------------------------------------------------
    app.contextMenu.addItem({
      command: CommandIDs.share,
      selector: '.jp-DirListing-item[data-isdir]',
      rank: 3,
      args: { from: 'filebrowser' }
    });
    app.contextMenu.addItem({
      command: CommandIDs.submitJob,
      selector: '.jp-DirListing-item[data-file-type="python"]',
      rank: 4,
      args: { from: 'filebrowser' }
    });
    app.docRegistry.addWidgetExtension('Notebook', {
      createNew: (nb: NotebookPanel): void => {
        if (!first || first.viewer.owner) {
          const button = new ToolbarButton({
            label: 'Share…',
            tooltip: 'Share this notebook (classhub)',
            onClick: () => void app.commands.execute(CommandIDs.share, { path: nb.context.path })
          });
          nb.toolbar.insertItem(10, 'classhubShare', button);
        }
      }
    });

    // -- a server shared with me -----------------------------------------------------------------
    if (first && !first.viewer.owner) {
      const text = bannerText(first)!;
      const banner = (widget: DocumentWidget): void => {
        const onCopy = readOnly
          ? () => void app.commands.execute(CommandIDs.copy, { path: widget.context.path })
          : null;
        widget.contentHeader.addWidget(new ShareBanner(text, onCopy));
      };
      const extension: DocumentRegistry.WidgetExtension = {
        createNew: (widget: any) => {
          if (widget instanceof DocumentWidget) {
            banner(widget);
          }
        }
      };
      for (const factory of ['Notebook', 'Editor']) {
        app.docRegistry.addWidgetExtension(factory, extension);
      }
      if (readOnly && notebooks) {
        notebooks.widgetAdded.connect((_, nb) => lockNotebook(nb));
      }
      if (readOnly) {
        refuseChanges(app, () => void app.commands.execute(CommandIDs.copy));
      }
    }

    // -- culler warnings as notifications ----------------------------------------------------------
    const shown = new Map<string, string>();
    /** warnings answered with "keep running": not shown again while the culler catches up */
    const answered = new Set<string>();
    function showCullWarnings(warnings: ICullWarning[]): void {
      const now = new Date();
      const current = new Set<string>();
      for (const w of warnings) {
        const key = `${w.server_name}@${w.cull_at}`;
        if (answered.has(key)) {
          continue;
        }
        current.add(key);
        if (shown.has(key)) {
          Notification.update({ id: shown.get(key)!, message: cullMessage(w, now) });
          continue;
        }
        const id = Notification.warning(cullMessage(w, now), {
          autoClose: false,
          actions: [
            {
              label: 'Keep running',
              caption: 'Tell classhub you are still using this server',
              callback: () => void app.commands.execute(CommandIDs.keep)
            },
            {
              label: 'Stop now',
              caption: "Stop it on the hub's home page",
              displayType: 'warn',
              callback: () =>
                void window.open(`${panel.state?.hub_prefix || '/hub/'}home`, '_blank', 'noopener')
            }
          ]
        });
        shown.set(key, id);
      }
      for (const [key, id] of shown) {
        if (!current.has(key)) {
          Notification.dismiss(id);
          shown.delete(key);
        }
      }
    }
    if (first && first.viewer.owner) {
      window.setInterval(async () => {
        try {
          const culling = await serviceRequest<{ warnings: ICullWarning[] }>('culling/me');
          showCullWarnings(culling.warnings || []);
          if ((culling.warnings || []).length !== (panel.state?.culling?.warnings || []).length) {
            await refresh();
          }
        } catch (error) {
          console.warn('classhub: cull warnings could not be read', error);
        }
      }, CULL_POLL_MS);
      // while one of my jobs is active, its state and place in the queue move: follow them
      window.setInterval(async () => {
        const jobs = panel.state?.jobs;
        if (!jobs || !jobs.some(isActiveJob)) {
          return;
        }
        try {
          const owner = encodeURIComponent(panel.state?.owner || '');
          const answer = await serviceRequest<{ jobs: IJob[] } | IJob[]>(
            `jobs?owner=${owner}&limit=20`
          );
          const fresh = Array.isArray(answer) ? answer : answer.jobs || [];
          if (JSON.stringify(fresh) !== JSON.stringify(panel.state?.jobs)) {
            panel.updateJobs(fresh);
          }
        } catch (error) {
          console.warn('classhub: jobs could not be read', error);
        }
      }, JOBS_POLL_MS);
    }
  }
};

/**
 * No editing in a read-only share: every cell (also those added later) is read-only, the
 * document is JupyterLab's read-only kind, and it is never "unsaved".
 *
 * Why `syncEditable = false`: a cell made read-only otherwise writes `"editable": false` into
 * its metadata, a change that marked the tab as unsaved and asked "Save your work?" on close.
 * Why `dirty` is reset: nothing can be saved to a read-only share (the server refuses it and the
 * contents say `writable: false`), so there is never unsaved work to ask about.
 */
function lockNotebook(nb: NotebookPanel): void {
  const lock = (): void => {
    for (const cell of nb.content.widgets) {
      cell.syncEditable = false;
      cell.readOnly = true;
    }
  };
  void nb.context.ready.then(() => {
    const model = nb.context.model;
    model.readOnly = true;
    model.dirty = false;
    model.stateChanged.connect((_, change) => {
      if (change.name === 'dirty' && change.newValue) {
        model.dirty = false;
      }
    });
    lock();
    nb.content.model?.cells.changed.connect(lock);
  });
  nb.content.activeCellChanged.connect(lock);
}

/**
 * Commands that would run, change or save a document say why they do nothing in a read-only
 * share (`readOnlyRefusal`), with "Copy to my server", instead of running. Keyboard shortcuts,
 * menus and toolbar buttons all go through `commands.execute`.
 */
function refuseChanges(app: JupyterFrontEnd, copy: () => void): void {
  const execute = app.commands.execute.bind(app.commands);
  let shown = '';
  app.commands.execute = (id: string, args?: any): Promise<any> => {
    const why = readOnlyRefusal(id);
    if (why === null) {
      return execute(id, args);
    }
    if (shown) {
      Notification.dismiss(shown);
    }
    shown = Notification.info(why, {
      autoClose: 8000,
      actions: [{ label: 'Copy to my server', callback: copy }]
    });
    return Promise.resolve(undefined);
  };
}

export default plugin;
