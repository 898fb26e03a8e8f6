/**
 * The panel's state logic (src/state.ts): what a person reads in the panel follows from the
 * JSON the server answers.
 */
import {
  IAssignment,
  assignmentPageUrl,
  assignmentScore,
  ICompetition,
  ICourseUsage,
  IJob,
  bannerText,
  cancelledText,
  cullMessage,
  describeAssignment,
  describeCompetition,
  describeJob,
  describeShare,
  formatBytes,
  formatDuration,
  formatTime,
  isActiveJob,
  isReadOnly,
  jobName,
  jobRequest,
  parseQuantity,
  notebookPath,
  notebookSentText,
  predictionsPath,
  quotaBars,
  readOnlyRefusal,
  scoredText,
  secondsLeft,
  shareRequest,
  templateText,
  timesIn,
  waitingText
} from '../src/state';

describe('parseQuantity', () => {
  it('reads Kubernetes quantities', () => {
    expect(parseQuantity('2')).toBe(2);
    expect(parseQuantity('500m')).toBeCloseTo(0.5);
    expect(parseQuantity('4Gi')).toBe(4 * 1024 ** 3);
    expect(parseQuantity('1.5')).toBe(1.5);
    expect(parseQuantity('3G')).toBe(3e9);
  });
  it('says NaN for what is not a quantity', () => {
    expect(parseQuantity('lots')).toBeNaN();
    expect(parseQuantity('4Xi')).toBeNaN();
    expect(parseQuantity(null)).toBeNaN();
  });
});

describe('quotaBars', () => {
  const course: ICourseUsage = {
    role: 'student',
    usage: { resources: { cpu: '1', memory: '2Gi', 'nvidia.com/mig-1g.18gb': '1' }, servers: 1, gpu_hours_week: 2.5 },
    limits: {
      resources: { cpu: '4', memory: '8Gi', 'nvidia.com/mig-1g.18gb': '1' },
      servers: 2,
      gpu_hours_per_week: '10'
    }
  };

  it('has one bar per limit, with what is used of it', () => {
    const bars = quotaBars(course);
    expect(bars.map(b => b.label)).toEqual([
      'CPU cores',
      'Memory',
      'MIG 1g.18gb slices',
      'Servers',
      'GPU-hours this week'
    ]);
    expect(bars[0]).toMatchObject({ used: 1, limit: 4, fraction: 0.25, text: '1 of 4' });
    expect(bars[1].text).toBe('2.0 GiB of 8.0 GiB');
    expect(bars[2].fraction).toBe(1);
    expect(bars[4]).toMatchObject({ fraction: 0.25, text: '2.5 of 10 h' });
  });

  it('draws no bar for what has no limit, and a full bar for a limit of 0 that is used', () => {
    const bars = quotaBars({
      ...course,
      usage: { ...course.usage, resources: { 'nvidia.com/gpu': '1' } },
      limits: { resources: { 'nvidia.com/gpu': '0' }, servers: null, gpu_hours_per_week: null }
    });
    expect(bars).toHaveLength(1);
    expect(bars[0]).toMatchObject({ label: 'GPUs', fraction: 1 });
  });

  it('never overfills a bar', () => {
    const bars = quotaBars({ ...course, usage: { ...course.usage, servers: 5 } });
    expect(bars.find(b => b.label === 'Servers')!.fraction).toBe(1);
  });
});

describe('countdowns', () => {
  it('formats durations a person reads at a glance', () => {
    expect(formatDuration(12)).toBe('12 s');
    expect(formatDuration(250)).toBe('4 min 10 s');
    expect(formatDuration(3900)).toBe('1 h 05 min');
    expect(formatDuration(-5)).toBe('0 s');
  });

  it('counts down from the cull time, not from when the warning was read', () => {
    const w = { server_name: '', cull_at: '2026-12-01T10:10:00+00:00', seconds_left: 600, message: 'idle' };
    expect(secondsLeft(w, new Date('2026-12-01T10:05:00Z'))).toBe(300);
    expect(secondsLeft(w, new Date('2026-12-01T10:20:00Z'))).toBe(0);
    expect(cullMessage(w, new Date('2026-12-01T10:05:00Z'))).toBe(
      'Your server will be stopped in 5 min 00 s because it is idle.'
    );
    const old = { ...w, server_name: 'gpu', message: 'reached its maximum age' };
    expect(cullMessage(old, new Date('2026-12-01T10:09:30Z'))).toMatch(
      /^Your server "gpu" will be stopped in 30 s because it reached its maximum running time/
    );
  });
});

describe('who looks', () => {
  it('shows no banner to the owner, and says how a share is shared to anyone else', () => {
    expect(bannerText({ owner: 'student1', viewer: { name: 'student1', owner: true, access: 'owner' } })).toBeNull();
    expect(bannerText({ owner: 'student1', viewer: { name: 'ta1', owner: false, access: 'read-only' } })).toBe(
      'Read-only: shared by student1'
    );
    expect(bannerText({ owner: 'student1', viewer: { name: 'ta1', owner: false, access: 'edit' } })).toBe(
      'Shared by student1 (editable)'
    );
  });

  it('tells a read-only viewer why running, changing or saving does nothing', () => {
    for (const id of ['notebook:run-cell-and-select-next', 'notebook:run-all-cells', 'runmenu:run',
                      'notebook:restart-run-all', 'notebook:clear-all-cell-outputs', 'kernelmenu:restart']) {
      expect(readOnlyRefusal(id)).toMatch(/does not run here\. Copy it to your server/);
    }
    for (const id of ['docmanager:save', 'docmanager:save-as', 'docmanager:rename']) {
      expect(readOnlyRefusal(id)).toMatch(/nothing is saved here/);
    }
    for (const id of ['notebook:delete-cell', 'notebook:insert-cell-below', 'notebook:change-cell-to-markdown']) {
      expect(readOnlyRefusal(id)).toMatch(/cells cannot be changed here/);
    }
    for (const id of ['notebook:copy-cell', 'notebook:move-cursor-down', 'docmanager:open', 'classhub:copy-to-my-server']) {
      expect(readOnlyRefusal(id)).toBeNull();
    }
  });

  it('opens documents read-only only for read-only visitors', () => {
    expect(isReadOnly({ name: 'ta1', owner: false, access: 'read-only' })).toBe(true);
    expect(isReadOnly({ name: 'ta1', owner: false, access: 'edit' })).toBe(false);
    expect(isReadOnly({ name: 's', owner: true, access: 'owner' })).toBe(false);
  });
});

describe('shareRequest', () => {
  it('makes the body of POST /api/shares', () => {
    expect(shareRequest({ kind: 'read-only', with: 'user', user: ' ta1 ', path: '/week1.ipynb' })).toEqual({
      body: { kind: 'read-only', user: 'ta1', path: 'week1.ipynb' }
    });
    expect(shareRequest({ kind: 'read-only', with: 'course', course: 'demo101', minutes: 90 })).toEqual({
      body: { kind: 'read-only', group: 'demo101', minutes: 90 }
    });
    expect(shareRequest({ kind: 'edit', with: 'link', minutes: 60, path: '' })).toEqual({
      body: { kind: 'edit', link: true, minutes: 60 }
    });
  });

  it('says what to change instead of sending a request that would be refused', () => {
    expect(shareRequest({ kind: 'read-only', with: 'user', user: '  ' })).toEqual({
      error: 'Type the user name of the person to share with.'
    });
    expect(shareRequest({ kind: 'read-only', with: 'link', minutes: 0 })).toEqual({
      error: 'A link must expire: give it a number of minutes.'
    });
    expect(shareRequest({ kind: 'read-only', with: 'user', user: 'x', minutes: 1.5 })).toHaveProperty('error');
    expect(shareRequest({ kind: 'read-only', with: 'course' })).toHaveProperty('error');
  });
});

describe('describeShare', () => {
  it('reads like a sentence in the lists', () => {
    const share = { id: 1, owner: 'student1', kind: 'read-only', path: 'week1.ipynb', target_kind: 'user', target: 'ta1' };
    expect(describeShare(share, true)).toBe('read-only · week1.ipynb · with ta1');
    expect(describeShare({ ...share, kind: 'edit', path: null }, false)).toBe('editable · whole server · from student1');
    expect(describeShare({ ...share, target_kind: 'link', expires_at: '2026-12-01T14:30:00+00:00' }, true)).toBe(
      'read-only · week1.ipynb · by link · until 14:30 UTC'
    );
  });
});

describe('describeJob', () => {
  it('says where a queued job stands', () => {
    const job: IJob = { id: 'j1', name: 'resnet', course: 'demo101', state: 'queued', queue_position: 2 };
    expect(describeJob(job)).toBe('resnet (demo101): queued, 2nd in the queue');
    expect(describeJob({ ...job, queue_position: 11 })).toBe('resnet (demo101): queued, 11th in the queue');
    expect(describeJob({ ...job, state: 'running', queue_position: null })).toBe('resnet (demo101): running');
  });
});

describe('waitingText', () => {
  const job: IJob = {
    id: 'j1',
    name: 'train',
    course: 'demo101',
    state: 'queued',
    queue_position: 1,
    reason: "waiting for 1 node with 1 free nvidia.com/gpu; 1st in demo101's queue"
  };
  it("shows why a queued or preempted job waits", () => {
    expect(waitingText(job)).toBe(
      "Waits: waiting for 1 node with 1 free nvidia.com/gpu; 1st in demo101's queue"
    );
    expect(waitingText({ ...job, state: 'preempted' })).toMatch(/^Waits: /);
  });
  it('shows the times in a reason as every other time: one format, the reader\'s', () => {
    const h23 = new Intl.DateTimeFormat('en-GB', { dateStyle: 'medium', timeStyle: 'short', timeZone: 'UTC' });
    const h12 = new Intl.DateTimeFormat('en-US', { dateStyle: 'medium', timeStyle: 'short', timeZone: 'UTC' });
    const reason = 'held by your job a (until 2026-12-04T13:55Z at the latest); estimated start 2026-12-04T14:20Z';
    expect(timesIn(reason, h23)).toBe(
      'held by your job a (until 4 Dec 2026, 13:55 at the latest); estimated start 4 Dec 2026, 14:20'
    );
    expect(timesIn(reason, h12)).toBe(
      'held by your job a (until Dec 4, 2026, 1:55 PM at the latest); estimated start Dec 4, 2026, 2:20 PM'
    );
    expect(waitingText({ ...job, reason })).not.toContain('2026-12-04T');
  });
  it('shows one time as the pages do, and leaves what is not a time as it is', () => {
    const h12 = new Intl.DateTimeFormat('en-US', { dateStyle: 'medium', timeStyle: 'short', timeZone: 'UTC' });
    expect(formatTime('2026-12-05T13:22:05Z', h12)).toBe('Dec 5, 2026, 1:22 PM');
    expect(formatTime('soon', h12)).toBe('soon');
  });
  it('says in plain words what Cancel did', () => {
    expect(cancelledText('train', 'cancelled')).toBe('Cancelled train: it left the queue and will not start.');
    expect(cancelledText('train', 'running')).toBe(
      'Stopping train: its programs are asked to stop, and stopped for good after a short grace period.'
    );
    expect(cancelledText('train', 'running')).not.toMatch(/SIG/);
  });
  it('says nothing for a job that does not wait, or without a reason', () => {
    expect(waitingText({ ...job, state: 'running' })).toBeNull();
    expect(waitingText({ ...job, state: 'failed' })).toBeNull();
    expect(waitingText({ ...job, reason: null })).toBeNull();
    expect(waitingText({ ...job, reason: '' })).toBeNull();
  });
  it('knows which jobs are still active', () => {
    const active = ['queued', 'admitted', 'running', 'preempted'] as const;
    expect(active.every(state => isActiveJob({ state }))).toBe(true);
    const ended = ['succeeded', 'failed', 'cancelled'] as const;
    expect(ended.some(state => isActiveJob({ state }))).toBe(false);
  });
});

describe('jobName', () => {
  it('makes a name the API takes from the script', () => {
    expect(jobName('lab3/train.py')).toBe('train');
    expect(jobName('My_Train Script.PY')).toBe('my-train-script');
    expect(jobName('__init__.py')).toBe('init');
    expect(jobName('???.py')).toBe('job');
    const long = jobName(`${'a'.repeat(62)}_b.py`);
    expect(long).toBe('a'.repeat(62));
    expect(long).toMatch(/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/);
  });
});

describe('jobRequest', () => {
  const form = { path: 'lab3/train.py', replicas: 1, gpus: 0, maxRuntimeMinutes: 0 };
  it('runs the script in its folder, with one CPU core when no GPU is asked', () => {
    expect(jobRequest(form)).toEqual({
      body: {
        name: 'train',
        command: ['python', 'train.py'],
        workdir: 'lab3',
        replicas: 1,
        resources: { cpu: '1' }
      }
    });
  });
  it('runs a script at the top of the home in the home', () => {
    const request = jobRequest({ ...form, path: '/hello.py' });
    expect(request).toEqual({
      body: expect.objectContaining({ command: ['python', 'hello.py'], workdir: '' })
    });
  });
  it('asks for GPUs per replica, a course and a runtime in seconds', () => {
    const request = jobRequest({
      path: 'a/b/ddp.py',
      course: 'demo101',
      replicas: 2,
      gpus: 1,
      maxRuntimeMinutes: 30
    });
    expect(request).toEqual({
      body: {
        name: 'ddp',
        command: ['python', 'ddp.py'],
        workdir: 'a/b',
        replicas: 2,
        resources: { 'nvidia.com/gpu': 1 },
        course: 'demo101',
        max_runtime: 1800
      }
    });
  });
  it('leaves the course and the runtime to the service when not given', () => {
    const request = jobRequest({ ...form, course: '', maxRuntimeMinutes: null });
    expect('body' in request && Object.keys(request.body).sort()).toEqual([
      'command',
      'name',
      'replicas',
      'resources',
      'workdir'
    ]);
  });
  it('says what to change', () => {
    const error = (f: Partial<typeof form>) => {
      const r = jobRequest({ ...form, ...f });
      return 'error' in r ? r.error : null;
    };
    expect(error({ path: 'week1.ipynb' })).toMatch(/Python script/);
    expect(error({ path: '../other/train.py' })).toMatch(/inside your home/);
    expect(error({ replicas: 0 })).toMatch(/Replicas/);
    expect(error({ replicas: 1.5 })).toMatch(/Replicas/);
    expect(error({ replicas: NaN })).toMatch(/Replicas/);
    expect(error({ gpus: -1 })).toMatch(/GPUs per replica/);
    expect(error({ maxRuntimeMinutes: -5 })).toMatch(/runtime/);
    expect(error({ maxRuntimeMinutes: NaN })).toMatch(/runtime/);
  });
});

describe('describeAssignment', () => {
  const a: IAssignment = {
    course: 'demo101',
    name: 'lab1',
    title: 'Lab 1',
    folder: 'lab1',
    due_at: '2026-12-14T17:00:00+00:00',
    late_policy: 'accept-late',
    accepting: true,
    late_now: false,
    my_submissions: []
  };
  const when = (iso: string) => iso.slice(0, 10);
  it('says when it is due and that nothing was submitted', () => {
    expect(describeAssignment(a, when)).toBe('Lab 1 (demo101), due 2026-12-14: not submitted yet');
  });
  it('names the last submission and whether it was late', () => {
    const s = { id: 1, submitted_at: '2026-12-13T10:00:00+00:00', late: false, files: 2, skipped: [], latest: false };
    const last = { ...s, id: 2, submitted_at: '2026-12-15T10:00:00+00:00', late: true, latest: true };
    expect(describeAssignment({ ...a, my_submissions: [s, last] }, when)).toBe(
      'Lab 1 (demo101), due 2026-12-14: submitted 2026-12-15 (late)'
    );
  });
});

describe('assignmentScore', () => {
  const a: IAssignment = {
    course: 'demo101',
    name: 'lab1',
    title: 'Lab 1',
    folder: 'lab1',
    due_at: '2026-12-14T17:00:00+00:00',
    late_policy: 'refuse',
    accepting: true,
    late_now: false,
    my_submissions: [],
    autograded: true,
    max_score: 6
  };
  const s = { id: 1, submitted_at: '2026-12-13T10:00:00+00:00', late: false, files: 2, skipped: [], latest: true };
  it('says nothing when the assignment is not autograded or nothing was submitted', () => {
    expect(assignmentScore(a)).toBeNull();
    expect(assignmentScore({ ...a, autograded: false, my_submissions: [s] })).toBeNull();
  });
  it('says my last submission is being graded while its job waits', () => {
    const queued = { ...s, feedback: { state: 'queued', message: 'Waiting for the grader.' } };
    expect(assignmentScore({ ...a, my_submissions: [queued] })).toBe('Grading…');
  });
  it('gives the score of my last submission, as the course page writes it', () => {
    const first = { ...s, score: 2, max_score: 6, latest: false, feedback: { state: 'done' } };
    const last = { ...s, id: 2, score: 4.5, max_score: 6, feedback: { state: 'done', message: 'Graded.' } };
    expect(assignmentScore({ ...a, my_submissions: [first, last] })).toBe('Score 4.5 / 6');
  });
  it('says why a grading did not finish', () => {
    const failed = { ...s, score: null, feedback: { state: 'failed', message: 'Grading could not start: no profile.' } };
    expect(assignmentScore({ ...a, my_submissions: [failed] })).toBe('Not graded. Grading could not start: no profile.');
    const stopped = { ...s, score: 0, max_score: 6, feedback: { state: 'failed', message: 'Grading did not finish.' } };
    expect(assignmentScore({ ...a, my_submissions: [stopped] })).toBe('Score 0 / 6. Grading did not finish.');
  });
  it('links to the assignment on its course page, where the feedback is', () => {
    expect(assignmentPageUrl('/prefix/hub/', { ...a, course: 'dl 201' })).toBe(
      '/prefix/services/classhub/courses/dl%20201#assignment-lab1'
    );
    expect(assignmentPageUrl(undefined, a)).toBe('/services/classhub/courses/demo101#assignment-lab1');
  });
});

describe('formatBytes', () => {
  it('writes home sizes as the course page does', () => {
    expect(formatBytes(512)).toBe('512 B');
    expect(formatBytes(3 * 1024 * 1024)).toBe('3.0 MiB');
    expect(formatBytes(9 * 1024 ** 3)).toBe('9.0 GiB');
    expect(formatBytes(null)).toBe('unknown');
  });
});

describe('describeCompetition', () => {
  const row = (rank: number, student: string, score: number, me = false) => ({
    rank, student, score, me, submitted_at: '2026-12-04T10:00:00+00:00', submissions: 1
  });
  const c: ICompetition = {
    course: 'demo101',
    name: 'digits',
    title: 'Cats or dogs',
    metric: 'accuracy',
    ends_at: '2026-12-14T17:00:00+00:00',
    ended: false,
    accepting: true,
    daily_limit: 5,
    left_today: 5,
    my_submissions: [],
    leaderboard: { shown: 'public', public: [row(1, 'student3', 1)], private: null }
  };
  const when = (iso: string) => iso.slice(0, 10);

  it('says when it ends, that I have not submitted, and what I have left today', () => {
    expect(describeCompetition(c, when)).toBe(
      'Cats or dogs (demo101), ends 2026-12-14: not submitted yet; 5 of 5 left today'
    );
  });

  it('gives my best public score and rank during the competition', () => {
    const mine = {
      ...c,
      left_today: 3,
      my_submissions: [{ id: 1, submitted_at: '2026-12-04T10:00:00+00:00', public_score: 0.9 }],
      leaderboard: { shown: 'public' as const, public: [row(1, 'student3', 1), row(2, 'student1', 0.9, true)], private: null }
    };
    expect(describeCompetition(mine, when)).toBe(
      'Cats or dogs (demo101), ends 2026-12-14: best public accuracy 0.9000, rank 2 of 2; 3 of 5 left today'
    );
  });

  it('gives the private rank once it ended', () => {
    const ended = {
      ...c,
      ended: true,
      accepting: false,
      leaderboard: { shown: 'private' as const, public: null, private: [row(1, 'student1', 0.85, true)] }
    };
    expect(describeCompetition(ended, when)).toBe(
      'Cats or dogs (demo101), ended 2026-12-14: best private accuracy 0.8500, rank 1 of 1; final'
    );
  });

  it('says what was scored, and takes only a CSV selection as the file', () => {
    expect(scoredText(c, 0.75)).toBe('Scored Cats or dogs: public accuracy 0.7500.');
    expect(scoredText(c, null)).toBe('Scored Cats or dogs: public accuracy –.');
    expect(predictionsPath('out/preds.CSV')).toBe('out/preds.CSV');
    expect(predictionsPath('lab1.ipynb')).toBeNull();
    expect(predictionsPath(null)).toBeNull();
  });

  it('says a notebook is pending or why the last one failed, and submits the open notebook', () => {
    const failed: ICompetition = {
      ...c,
      my_submissions: [
        { id: 1, submitted_at: '2026-12-04T10:00:00+00:00', public_score: null, state: 'failed',
          message: 'Your notebook crashed in cell 2: ValueError: boom' }
      ]
    };
    expect(describeCompetition(failed, when)).toBe(
      'Cats or dogs (demo101), ends 2026-12-14: 1 submitted; 5 of 5 left today; last one failed: ' +
        'Your notebook crashed in cell 2: ValueError: boom'
    );
    const pending: ICompetition = {
      ...failed,
      my_submissions: [...failed.my_submissions,
        { id: 2, submitted_at: '2026-12-04T10:05:00+00:00', public_score: null, state: 'pending' }]
    };
    expect(describeCompetition(pending, when)).toContain('; 1 pending');
    expect(notebookPath('model.ipynb', 'preds.csv')).toBe('model.ipynb');
    expect(notebookPath('notes.md', 'work/model.IPYNB')).toBe('work/model.IPYNB');
    expect(notebookPath(null, 'preds.csv')).toBeNull();
    expect(notebookSentText(c, 'model.ipynb')).toBe(
      'Submitted model.ipynb to Cats or dogs: it runs as a job; its score shows here when it is scored.'
    );
  });
});

describe('templateText', () => {
  it('tells the staff which templates their students do not see yet', () => {
    expect(templateText({ course: 'demo101', name: 'lab1' })).toBe('lab1 (demo101)');
    expect(templateText({ course: 'demo101', name: 'exam', latest: { students_see: false } })).toBe(
      'exam (demo101): students do not see it yet'
    );
    expect(templateText({ course: 'demo101', name: 'x', display_name: 'Lab X', latest: { students_see: true } })).toBe(
      'Lab X (demo101)'
    );
  });
});
