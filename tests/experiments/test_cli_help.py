"""The `sharp` command line as a whole: every command (found by walking the typer app, so a new one is
covered without editing this file) answers --help and has the one error exit; the one KEY=VALUE grammar;
bad input that every command shares (a bad --set / --retriever-set / --opt / --fix, a server that is down
or a URL that is wrong, a database URL with a password) fails before any work, clearly, the password
never shown. The README's documented examples run in tests/retrieval/test_readme_commands.py."""

from __future__ import annotations

import pytest
import typer
from live_servers import free_port
from toy_world import write_dataset
from typer.testing import CliRunner

from experiments import options as o
from experiments.cli import app
from program.errors import ConfigError, SharpError

runner = CliRunner()


def command_paths(group=None, prefix=()) -> list[tuple[tuple[str, ...], object]]:
    """(argument path, click command) for every command of the app, sub-apps (`sharp lm ...`) included."""
    group = group or typer.main.get_command(app)
    out = []
    for name, command in sorted(group.commands.items()):
        path = (*prefix, name)
        if hasattr(command, "commands"):
            out += [(path, command), *command_paths(command, path)]
        else:
            out.append((path, command))
    return out


COMMANDS = command_paths()
LEAVES = [(path, cmd) for path, cmd in COMMANDS if not hasattr(cmd, "commands")]


def test_the_walk_finds_the_commands():
    names = {" ".join(path) for path, _ in COMMANDS}
    assert {"index", "eval", "arena", "compile", "tune", "export", "lm", "lm serve", "train-reranker"} <= names


@pytest.mark.parametrize("path", [path for path, _ in COMMANDS], ids=" ".join)
def test_every_command_answers_help(path):
    res = runner.invoke(app, [*path, "--help"])
    assert res.exit_code == 0, res.output
    assert "Usage:" in res.output and "Traceback" not in res.output


@pytest.mark.parametrize("path,command", LEAVES, ids=[" ".join(p) for p, _ in LEAVES])
def test_every_command_has_the_one_error_exit(path, command):
    assert isinstance(command, o.Command), f"register `sharp {' '.join(path)}` with options.add_command"


# ---- the error exit -----------------------------------------------------------------------------------
def test_a_sharp_error_is_printed_literally_and_exits_2():
    toy = typer.Typer()
    message = "bad [bold]value[/bold] :smile: at C:\\new [/]"

    def boom() -> None:
        raise ConfigError(message)

    o.add_command(toy, "boom", boom)
    o.add_command(toy, "other", lambda: None)  # (two commands: typer keeps the names)
    res = runner.invoke(toy, ["boom"])
    assert res.exit_code == 2
    assert f"error: {message}" in res.output and "Traceback" not in res.output


def test_an_error_that_is_not_a_sharp_error_is_not_swallowed():
    toy = typer.Typer()

    def bug() -> None:
        raise KeyError("a bug")

    o.add_command(toy, "bug", bug)
    o.add_command(toy, "other", lambda: None)
    res = runner.invoke(toy, ["bug"])
    assert isinstance(res.exception, KeyError) and not isinstance(res.exception, SharpError)


# ---- shared options, declared once ----------------------------------------------------------------------
def test_shared_options_stand_where_opts_stands_and_arrive_as_one_options_object(tmp_path):
    toy = typer.Typer()
    got = []

    @o.shared(o.WHERE, o.SET, o.TRACKING_URI.but(help="Where to look the program up."))
    def cmd(
        question: str = typer.Argument(...),
        opts: o.Options = o.SHARED,
        k: int = typer.Option(3, "--k"),
    ) -> None:
        got.append((question, opts, k))

    o.add_command(toy, "cmd", cmd)
    o.add_command(toy, "other", lambda: None)
    res = runner.invoke(toy, ["cmd", "q?", "--k", "5", "--set", "a=1", "--set", "b=2", "--workspace", str(tmp_path)])
    assert res.exit_code == 0, res.output
    ((question, opts, k),) = got
    assert (question, k) == ("q?", 5)
    assert opts == o.Options(workspace=tmp_path, set_=("a=1", "b=2"))  # the rest: their defaults
    assert opts.dataset == "hotpotqa" and opts.system_config() == {"a": 1, "b": 2}
    names = [p.name for p in typer.main.get_command(toy).commands["cmd"].params]
    assert names == ["question", "dataset", "data_dir", "workspace", "set_", "tracking_uri", "k"]
    shown = " ".join(runner.invoke(toy, ["cmd", "--help"]).output.split())
    assert "--data-dir" in shown and "Where to look the program up." in shown


def test_a_command_with_shared_options_must_say_where_they_go():
    with pytest.raises(TypeError, match="opts"):
        o.shared(o.WHERE)(lambda k=1: None)
    with pytest.raises(TypeError, match="named twice"):
        o.shared(o.WHERE)(lambda dataset="x", opts=o.SHARED: None)


# ---- the one KEY=VALUE grammar ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "item,value",
    [
        ("k=3", 3),
        ("k=0.5", 0.5),
        ("k=true", True),
        ("k=null", None),
        ("k=", None),
        ("k=[1, 2]", [1, 2]),
        ("k=[3,5,7]", [3, 5, 7]),
        ('k={"a": 1}', {"a": 1}),  # JSON reads the same
        ('k="quoted: text"', "quoted: text"),
        ("k=openai/gpt-4o-mini", "openai/gpt-4o-mini"),
        ("k=/path/to/model", "/path/to/model"),
        ("k=a=b", "a=b"),  # only the first '=' splits
        ("k=2024-01-01", "2024-01-01"),  # a date stays text
        ("k=#1", "#1"),  # not a YAML comment
    ],
)
def test_values_are_read_as_yaml(item, value):
    assert o.parse_sets([item]) == {"k": value}


def test_dotted_keys_nest_and_later_items_win():
    got = o.parse_sets(["crag.upper=0.7", "crag.lower=0.2", " k = 1", "crag.upper=0.8"])
    assert got == {"crag": {"upper": 0.8, "lower": 0.2}, "k": 1}
    assert o.merged({"crag": {"upper": 0.5, "k": 3}, "x": 1}, got) == {
        "crag": {"upper": 0.8, "lower": 0.2, "k": 3},
        "x": 1,
        "k": 1,
    }


@pytest.mark.parametrize(
    "item,says",
    [
        ("threshold", "takes KEY=VALUE"),
        ("=3", "takes KEY=VALUE"),
        ("a..b=3", "takes KEY=VALUE"),
        ("k=[1, 2", "not valid YAML"),
        ("k={a: 1", "not valid YAML"),
    ],
)
def test_bad_items_name_the_option_and_the_item(item, says):
    with pytest.raises(ConfigError) as info:
        o.parse_sets([item], "--retriever-set")
    assert says in str(info.value) and "--retriever-set" in str(info.value) and repr(item) in str(info.value)


def test_a_key_set_to_a_value_cannot_nest():
    with pytest.raises(ConfigError, match="crag is already set"):
        o.parse_sets(["crag=1", "crag.upper=0.7"])


@pytest.fixture
def toy(tmp_path):
    """A datasets folder with the toy world as hotpotqa, and a workspace that does not exist yet."""
    write_dataset(tmp_path / "data")
    return ["--data-dir", str(tmp_path / "data"), "--workspace", str(tmp_path / "ws")], tmp_path / "ws"


@pytest.mark.parametrize(
    "command,option",
    [
        (["ask", "q?"], "--set"),
        (["eval"], "--retriever-set"),
        (["arena", "--systems", "vanilla"], "--set"),
        (["compile"], "--opt"),
        (["compile"], "--retriever-set"),
        (["tune"], "--fix"),
        (["retrieve", "q"], "--retriever-set"),
        (["train-reranker"], "--retriever-set"),
    ],
    ids=lambda v: v if isinstance(v, str) else v[0],
)
def test_every_command_reads_key_value_options_alike(toy, command, option):
    args, ws = toy
    res = runner.invoke(app, [*command, option, "no-equals-sign", *args])
    assert res.exit_code == 2, res.output
    assert f"error: {option} takes KEY=VALUE" in " ".join(res.output.split())
    assert not ws.exists()  # refused before anything was made


@pytest.mark.parametrize("command", [["index"], ["retrieve", "q"], ["eval-retrieval"]], ids=lambda c: c[0])
def test_set_on_a_retrieval_command_points_to_retriever_set(toy, command):
    args, ws = toy
    res = runner.invoke(app, [*command, "--set", "bm25_k1=2.0", *args])
    assert res.exit_code == 2
    assert "--retriever-set bm25_k1=2.0" in " ".join(res.output.split())
    assert not ws.exists()


# ---- servers that are down, URLs that are wrong, passwords --------------------------------------------
@pytest.mark.parametrize("command", [["compile"], ["tune"], ["demo"], ["ask", "q?"], ["eval"]], ids=lambda c: c[0])
@pytest.mark.parametrize("wrong", ["down", "no scheme"])
def test_an_lm_server_that_is_down_or_a_wrong_url_fails_before_any_work(toy, closed_port_base, command, wrong):
    args, ws = toy
    base = closed_port_base if wrong == "down" else closed_port_base.removeprefix("http://")
    res = runner.invoke(app, [*command, *args, "--lm", "openai/x", "--api-base", base])
    assert res.exit_code == 2, res.output
    text = " ".join(res.output.split())
    if wrong == "down":
        assert f"error: no LM server answers at {base}" in text and "sharp lm serve" in text
    else:
        assert f"api_base must start with http:// or https://, got '{base}'" in text
    assert not ws.exists()


@pytest.mark.parametrize("command", [["demo"], ["train-reranker", "--n-train", "2"]], ids=lambda c: c[0])
def test_a_tracking_server_that_is_down_fails_before_any_work(toy, command, monkeypatch):
    from data.sources import DatasetSource

    monkeypatch.setattr(DatasetSource, "corpus", lambda self: pytest.fail("the corpus was read"))
    args, ws = toy
    down = f"http://127.0.0.1:{free_port()}"
    res = runner.invoke(app, [*command, *args, "--tracking-uri", down])
    assert res.exit_code == 2, res.output
    assert f"MLflow tracking server {down} is not reachable" in " ".join(res.output.split())
    assert not (ws / "indexes").exists() and not (ws / "rerankers").exists()


@pytest.mark.parametrize(
    "command,via",
    [(["ask", "q?"], "option"), (["eval-retrieval"], "option"), (["compile"], "env")],
    ids=["ask", "eval-retrieval", "compile"],
)
def test_a_chroma_server_that_is_down_is_named_with_how_to_start_it(toy, command, via):
    args, ws = toy
    url = f"http://127.0.0.1:{free_port()}"
    extra, env = (["--chroma-url", url], None) if via == "option" else ([], {"SHARP_CHROMA_URL": url})
    res = runner.invoke(app, [*command, *args, *extra], env=env)
    assert res.exit_code == 2, res.output
    text = " ".join(res.output.split())
    assert f"no Chroma server answers at {url}" in text and "chroma run --path" in text
    assert not (ws / "indexes").exists()


def test_a_database_url_never_shows_its_password(toy, new_store):
    args, ws = toy
    secret = "S3cret-pa55"
    store = f"postgresql://sharp:{secret}@127.0.0.1:{free_port()}/mlflow"
    res = runner.invoke(app, ["eval", *args, "--tracking-uri", store])
    assert res.exit_code == 2, res.output
    assert "sharp:***@127.0.0.1" in " ".join(res.output.split()) and secret not in res.output
    study = store.replace("/mlflow", "/optuna")
    res = runner.invoke(app, ["tune", *args, "--storage", study, "--tracking-uri", new_store(ws.parent / "ml.db")])
    assert res.exit_code == 2, res.output
    assert "sharp:***@127.0.0.1" in " ".join(res.output.split()) and secret not in res.output
