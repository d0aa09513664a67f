"""A reward the untrained toy model gets right about half the time, for test_resume.py's `trl-ada train` runs."""


def even_first_token(completion_ids, **kwargs):
    return [float(bool(ids) and ids[0] % 2 == 0) for ids in completion_ids]
