/**
 * The body of the "Submit as job…" dialog: the course (only when I am in several), replicas,
 * GPUs per replica and a maximum runtime. Native form controls, each with a <label>, so it
 * works by keyboard alone; the defaults (1 replica, no GPU, the service's runtime) submit as is.
 */
import { Widget } from '@lumino/widgets';

import { IJobForm } from './state';

export class JobForm extends Widget {
  constructor(path: string, courses: string[]) {
    super();
    this.addClass('classhub-share-form');
    this.addClass('classhub-job-form');
    const id = (name: string) => `classhub-job-${name}-${JobForm._n}`;
    JobForm._n += 1;
    const courseOptions = courses
      .map(c => `<option value="${escapeHtml(c)}">${escapeHtml(c)}</option>`)
      .join('');
    const course =
      courses.length > 1
        ? `<label for="${id('course')}">Course</label>
      <select id="${id('course')}" name="course">${courseOptions}</select>`
        : '';
    this.node.innerHTML = `
      <p class="classhub-share-what">python ${escapeHtml(path)}</p>
      ${course}
      <label for="${id('replicas')}">Replicas</label>
      <input id="${id('replicas')}" name="replicas" type="number" min="1" max="64" step="1" value="1" />
      <label for="${id('gpus')}">GPUs per replica</label>
      <input id="${id('gpus')}" name="gpus" type="number" min="0" max="64" step="1" value="0" />
      <label for="${id('minutes')}">Max runtime (minutes, empty: the default)</label>
      <input id="${id('minutes')}" name="minutes" type="number" min="1" step="1" value="" />
    `;
    this._path = path;
    this._course = courses.length === 1 ? courses[0] : '';
  }

  /** What the person chose (the Dialog calls this when "Submit" is pressed). */
  getValue(): IJobForm {
    const field = (name: string) =>
      this.node.querySelector<HTMLInputElement | HTMLSelectElement>(`[name=${name}]`);
    const number = (name: string, empty: number) => {
      const text = (field(name)?.value ?? '').trim();
      return text === '' ? empty : Number(text);
    };
    return {
      path: this._path,
      course: field('course')?.value ?? this._course,
      replicas: number('replicas', 1),
      gpus: number('gpus', 0),
      maxRuntimeMinutes: number('minutes', 0)
    };
  }

  private _path: string;
  private _course: string;
  private static _n = 0;
}

function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, c => `&#${c.charCodeAt(0)};`);
}
