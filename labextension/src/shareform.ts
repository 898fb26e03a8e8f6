/**
 * The body of the "Share…" dialog: read-only or editable, with a person, my course or a link,
 * and an expiry. Native form controls, each with a <label>, so it works by keyboard alone.
 */
import { Widget } from '@lumino/widgets';

import { IShareForm } from './state';

/**
 * When a share ends: the same choices as the classhub Sharing page ("Ends"), in minutes
 * (0: when its owner revokes it).
 */
export const EXPIRY: ReadonlyArray<[number, string]> = [
  [0, 'when I revoke it'],
  [90, 'in 90 minutes'],
  [1440, 'in a day'],
  [10080, 'in a week']
];

export class ShareForm extends Widget {
  constructor(path: string, courses: string[]) {
    super();
    this.addClass('classhub-share-form');
    const id = (name: string) => `classhub-share-${name}-${ShareForm._n}`;
    ShareForm._n += 1;
    const courseOptions = courses.map(c => `<option value="${escapeHtml(c)}">${escapeHtml(c)}</option>`).join('');
    this.node.innerHTML = `
      <p class="classhub-share-what">${path ? escapeHtml(path) : 'The whole server'}</p>
      <label for="${id('kind')}">Access</label>
      <select id="${id('kind')}" name="kind">
        <option value="read-only" selected>Read-only</option>
        <option value="edit">Editable</option>
      </select>
      <label for="${id('with')}">With</label>
      <select id="${id('with')}" name="with">
        <option value="user" selected>A person</option>
        ${courses.length ? '<option value="course">My course</option>' : ''}
        <option value="link">Anyone with the link</option>
      </select>
      <label for="${id('user')}" class="classhub-share-user">User name</label>
      <input id="${id('user')}" name="user" class="classhub-share-user" type="text" autocomplete="off" placeholder="e.g. ta1" />
      <label for="${id('course')}" class="classhub-share-course" hidden>Course</label>
      <select id="${id('course')}" name="course" class="classhub-share-course" hidden>${courseOptions}</select>
      <label for="${id('minutes')}">Ends</label>
      <select id="${id('minutes')}" name="minutes">${EXPIRY.map(
        ([minutes, label]) => `<option value="${minutes}">${label}</option>`
      ).join('')}</select>
    `;
    this._path = path;
    const withSelect = this.node.querySelector<HTMLSelectElement>('select[name=with]')!;
    withSelect.addEventListener('change', () => this._showTarget(withSelect.value));
  }

  private _showTarget(target: string): void {
    this.node.querySelectorAll<HTMLElement>('.classhub-share-user').forEach(n => {
      n.hidden = target !== 'user';
    });
    this.node.querySelectorAll<HTMLElement>('.classhub-share-course').forEach(n => {
      n.hidden = target !== 'course';
    });
    const minutes = this.node.querySelector<HTMLSelectElement>('select[name=minutes]')!;
    if (target === 'link' && minutes.value === '0') {
      minutes.value = '1440'; // a link someone could pass on ends in a day unless chosen otherwise
    }
  }

  /** What the person chose (the Dialog calls this when "Share" is pressed). */
  getValue(): IShareForm {
    const value = (name: string) =>
      this.node.querySelector<HTMLInputElement | HTMLSelectElement>(`[name=${name}]`)!.value;
    const minutes = value('minutes').trim();
    return {
      kind: value('kind') as IShareForm['kind'],
      with: value('with') as IShareForm['with'],
      user: value('user'),
      course: value('course'),
      minutes: minutes === '' ? 0 : Number(minutes),
      path: this._path
    };
  }

  private _path: string;
  private static _n = 0;
}

function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, c => `&#${c.charCodeAt(0)};`);
}
