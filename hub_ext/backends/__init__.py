"""The only code that talks to a cluster or to local processes (docs/architecture.md, rule 2).

- :mod:`.kubernetes` and :mod:`.local`: one backend per run mode; neither imports the other;
- what both modes share, here: the job backend interface (:mod:`.jobs`), template storage and its
  settings (:mod:`.templates`), seeding a home from a template (:mod:`.seeding`, and
  :mod:`.templates_cli`, the same engine as a command for a container of the user pod), and what a
  spawner does with templates at a start (:mod:`.templates_spawn`).
"""
