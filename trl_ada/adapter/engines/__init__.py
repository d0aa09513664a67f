"""What generates: the streaming engines, one module each (`base.TokenBackend`, the interface they share).

Nothing here imports a schedule (`trl_ada.adapter.schedules`): the schedules drive the engines."""
