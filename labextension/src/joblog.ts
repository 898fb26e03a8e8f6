/**
 * A job's log in the main area: where the job stands, which replica, and the replica's log in a
 * <pre>, read again every few seconds (only what is new, from the last byte read) while the job
 * is active; once it has ended, read to its end one last time and left as it is.
 */
import { Widget } from '@lumino/widgets';

import { ClasshubError, serviceBytes, serviceRequest } from './api';
import { IJob, IJobReplica, describeJob, isActiveJob, waitingText } from './state';

/** How often an active job's state and log are read again (ms). */
export const LOG_POLL_MS = 3000;

export class JobLogView extends Widget {
  constructor(private job: IJob) {
    super();
    this.addClass('classhub-job-log');
    this._status = document.createElement('p');
    this._status.className = 'classhub-job-log-status';
    this._status.setAttribute('role', 'status');
    this._status.textContent = describeJob(job);
    const label = document.createElement('label');
    label.className = 'classhub-job-log-replica';
    label.textContent = 'Replica ';
    this._replica = document.createElement('select');
    this._replica.addEventListener('change', () => this._switch(this._replica.value));
    label.append(this._replica);
    label.hidden = true;
    this._replicaLabel = label;
    this._pre = document.createElement('pre');
    this._pre.className = 'classhub-job-log-text';
    this._pre.setAttribute('aria-label', `Log of job ${job.name}`);
    this._pre.tabIndex = 0;
    this.node.append(this._status, label, this._pre);
    void this.poll();
    this._timer = window.setInterval(() => void this.poll(), LOG_POLL_MS);
  }

  dispose(): void {
    window.clearInterval(this._timer);
    super.dispose();
  }

  /** Read the job and what is new in the chosen replica's log. */
  async poll(): Promise<void> {
    if (this.isDisposed) {
      return;
    }
    if (this._busy) {
      this._again = true; // e.g. another replica was chosen while a read was under way
      return;
    }
    this._busy = true;
    try {
      const job = await serviceRequest<IJob>(`jobs/${encodeURIComponent(this.job.id)}`);
      this.job = job;
      const waiting = waitingText(job);
      this._status.textContent = waiting ? `${describeJob(job)}. ${waiting}` : describeJob(job);
      const replicas = job.replicas || [];
      this._showReplicas(replicas);
      if (replicas.length) {
        await this._read();
      } else if (!this._pre.textContent) {
        this._pre.textContent = isActiveJob(job)
          ? '(the log begins when the job runs)'
          : '(this job never ran: no log)';
        this._placeholder = true;
      }
      if (!isActiveJob(job)) {
        window.clearInterval(this._timer); // ended: its log is complete
      }
    } catch (error) {
      this._status.textContent = `The log could not be read: ${
        error instanceof ClasshubError ? error.message : String(error)
      }`;
    } finally {
      this._busy = false;
      if (this._again) {
        this._again = false;
        void this.poll();
      }
    }
  }

  private _showReplicas(replicas: IJobReplica[]): void {
    const keys = replicas.map(r => `${r.role}:${r.index}`);
    if (keys.join(',') !== this._keys.join(',')) {
      this._keys = keys;
      this._replica.replaceChildren(
        ...replicas.map((r, i) => {
          const option = document.createElement('option');
          option.value = keys[i];
          option.textContent = `${r.role} ${r.index}${r.rank !== undefined ? ` (rank ${r.rank})` : ''}`;
          return option;
        })
      );
      if (!keys.includes(this._chosen)) {
        this._chosen = keys[0] || '';
      }
      this._replica.value = this._chosen;
      this._replicaLabel.hidden = replicas.length < 2;
    }
  }

  private _switch(key: string): void {
    this._chosen = key;
    this._offset = 0;
    this._decoder = new TextDecoder();
    this._pre.textContent = '';
    void this.poll();
  }

  private async _read(): Promise<void> {
    const chosen = this._chosen;
    const [role, index] = chosen.split(':');
    const query = `role=${encodeURIComponent(role)}&index=${index}&offset=${this._offset}`;
    let bytes: Uint8Array;
    try {
      bytes = await serviceBytes(`jobs/${encodeURIComponent(this.job.id)}/logs?${query}`);
    } catch (error) {
      if (error instanceof ClasshubError && error.status === 409) {
        return; // not started yet
      }
      throw error;
    }
    if (!bytes.length || chosen !== this._chosen) {
      return;
    }
    if (this._placeholder) {
      this._pre.textContent = '';
      this._placeholder = false;
    }
    this._offset += bytes.length;
    const atEnd = this._pre.scrollTop + this._pre.clientHeight >= this._pre.scrollHeight - 4;
    this._pre.append(this._decoder.decode(bytes, { stream: true }));
    if (atEnd) {
      this._pre.scrollTop = this._pre.scrollHeight;
    }
  }

  private _status: HTMLParagraphElement;
  private _replica: HTMLSelectElement;
  private _replicaLabel: HTMLLabelElement;
  private _pre: HTMLPreElement;
  private _keys: string[] = [];
  private _chosen = '';
  private _offset = 0;
  private _decoder = new TextDecoder();
  private _placeholder = false;
  private _busy = false;
  private _again = false;
  private _timer: number;
}
