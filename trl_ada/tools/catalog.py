"""``trl-ada recipes``: the packaged recipes and accelerate configs, by name.

    trl-ada recipes                            list every recipe and accelerate config with its first comment line
    trl-ada recipes --path accelerate/zero2    print a file's absolute path (for `accelerate launch --config_file`)
    trl-ada recipes --show toy-cpu             print a recipe, to copy and edit

A name is a file's path under the recipes folder without ``.yaml``: ``toy-cpu``, ``qwen2.5-math-1.5b/hard-balanced``,
``accelerate/zero2``. ``trl-ada train --config`` takes a name as well as a path. The files ship inside the wheel
(``trl_ada/recipes``); in a git checkout they are the top-level ``recipes/`` folder, the one the wheel is built from.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
from collections.abc import Sequence

from .cli import EXIT_OK, EXIT_USAGE

ACCELERATE = "accelerate"  # the folder of `accelerate launch` configs: not training recipes
SUFFIX = ".yaml"
_PREFIX = "recipes/"  # accepted and ignored, so the checkout-relative paths of the docs also work as names


class RecipeNotFound(LookupError):
    """No packaged recipe or config of that name; the message lists the names there are."""


def recipes_dir() -> pathlib.Path:
    """The folder holding the recipes: ``trl_ada/recipes`` in an installed wheel, else the checkout's ``recipes/``."""
    package = pathlib.Path(__file__).resolve().parent.parent  # trl_ada/, above this module's tools/
    for candidate in (package / "recipes", package.parent / "recipes"):
        if (candidate / "toy-cpu.yaml").is_file():
            return candidate
    raise FileNotFoundError(
        f"no recipes folder next to {package}: neither {package / 'recipes'} (an installed wheel) nor "
        f"{package.parent / 'recipes'} (a git checkout) holds toy-cpu.yaml"
    )


def names(kind: str = "all") -> list[str]:
    """Sorted names of the packaged files; ``kind``: ``"recipes"`` (training recipes), ``"accelerate"``, ``"all"``."""
    if kind not in ("all", "recipes", ACCELERATE):
        raise ValueError(f"kind {kind!r}: expected 'all', 'recipes' or {ACCELERATE!r}")
    root = recipes_dir()
    found = sorted(path.relative_to(root).with_suffix("").as_posix() for path in root.rglob(f"*{SUFFIX}"))
    if kind == "all":
        return found
    is_accelerate = [name.split("/", 1)[0] == ACCELERATE for name in found]
    return [name for name, accel in zip(found, is_accelerate, strict=True) if accel == (kind == ACCELERATE)]


def _normalise(name: str) -> str:
    name = name.strip().replace("\\", "/")
    name = name.removeprefix("./").removeprefix(_PREFIX)
    return name.removesuffix(SUFFIX)


def find(name: str, kind: str = "all") -> pathlib.Path:
    """The packaged file called ``name`` (``toy-cpu``, ``accelerate/zero2``; ``recipes/`` and ``.yaml`` optional)."""
    wanted = _normalise(name)
    available = names(kind)
    if wanted not in available:
        what = {"recipes": "recipe", ACCELERATE: "accelerate config", "all": "recipe or accelerate config"}[kind]
        raise RecipeNotFound(f"no packaged {what} named {name!r}; there are: {', '.join(available)}")
    return recipes_dir() / f"{wanted}{SUFFIX}"


def resolve_config(value: str) -> pathlib.Path:
    """``trl-ada train --config``: an existing file as given (it wins over a packaged name), else a packaged recipe."""
    path = pathlib.Path(value).expanduser()
    if path.is_file():
        return path
    try:
        return find(value, kind="recipes")
    except RecipeNotFound:
        raise RecipeNotFound(
            f"--config {value}: no such file, and no packaged recipe of that name. Packaged recipes: "
            f"{', '.join(names('recipes'))} (`trl-ada recipes` describes them)."
        ) from None


def describe(path: pathlib.Path) -> str:
    """The first sentence of a file's opening comment: every recipe and config opens with one saying what it is."""
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            return line.lstrip("#").strip().split(". ", 1)[0].rstrip(".:")
        if line.strip():
            break
    return ""


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``trl-ada recipes``."""
    parser = argparse.ArgumentParser(
        prog="trl-ada recipes",
        description=__doc__.split("\n\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--path", metavar="NAME", help="print the absolute path of a recipe or accelerate config")
    action.add_argument("--show", metavar="NAME", help="print a recipe or accelerate config")
    action.add_argument("--dir", action="store_true", help="print the folder holding them all")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``trl-ada recipes``; exit code 2 for a name that is not packaged."""
    args = build_parser().parse_args(argv)
    try:
        if args.path:
            print(find(args.path))
        elif args.show:
            sys.stdout.write(find(args.show).read_text())
        elif args.dir:
            print(recipes_dir())
        else:
            root = recipes_dir()
            listed = names()
            width = max(map(len, listed))
            for name in listed:
                print(f"{name.ljust(width)}  {describe(root / f'{name}{SUFFIX}')}")
    except RecipeNotFound as error:
        print(f"trl-ada recipes: error: {error.args[0]}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
