"""`vllm serve` command-line parsing for the LAB STAND-IN, rebuilt from data.

The flag list, types, choices and defaults are NOT written here: they are read from
lab/serving/vllm_flags/<version>.json, which dump_vllm_flags.py produced by building the
parser of the real vLLM wheel and walking its actions.  This module only re-creates the
behaviour of vLLM's FlexibleArgumentParser around argparse (vllm/utils/argparse_utils.py):
underscores accepted for dashes, `--model X` moved to the positional model tag, dotted
JSON keys (`--limit-mm-per-prompt.video 0`), `-O3`, and argparse's own error path
(usage line, "vllm serve: error: ...", exit status 2).
"""
import argparse
import glob
import json
import os
import re
import sys
from collections import defaultdict

PKG_DIR = os.path.dirname(os.path.abspath(__file__))
FLAG_DIRS = (
    os.path.join(PKG_DIR, "vllm_flags"),                     # inside the image
    os.path.join(os.path.dirname(PKG_DIR), "vllm_flags"),    # repository layout (lab/serving)
)


class ConfigError(ValueError):
    """A value argparse accepted but vLLM rejects when it builds its config (exit 1)."""

    def __init__(self, message, exception="ValueError", source=None):
        super().__init__(message)
        self.exception = exception
        self.source = source


def _version_key(path):
    name = os.path.basename(path)[:-len(".json")]
    return tuple(int(p) if p.isdigit() else 0 for p in re.split(r"[.+-]", name))


def flag_files():
    found = {}
    for d in FLAG_DIRS:
        for path in glob.glob(os.path.join(d, "*.json")):
            found.setdefault(os.path.basename(path), path)
    return sorted(found.values(), key=_version_key)


def load_spec(version=None, path=None):
    """Load the flag data of one vLLM version (default: $DGXSPARK_LAB_VLLM_VERSION, else the newest file)."""
    if path is None:
        path = os.environ.get("DGXSPARK_LAB_VLLM_FLAGS_FILE") or None
    if path is None:
        version = version or os.environ.get("DGXSPARK_LAB_VLLM_VERSION") or None
        files = flag_files()
        if not files:
            raise FileNotFoundError("no vLLM flag data found in %s" % ", ".join(FLAG_DIRS))
        if version:
            matches = [f for f in files if os.path.basename(f) == version + ".json"]
            if not matches:
                raise FileNotFoundError("no vLLM flag data for version %s (have: %s)" % (
                    version, ", ".join(os.path.basename(f)[:-5] for f in files)))
            path = matches[0]
        else:
            path = files[-1]
    with open(path, encoding="utf-8") as handle:
        spec = json.load(handle)
    spec["_path"] = path
    return spec


# --- type converters, named as vLLM's so argparse's messages read the same -------------

def human_readable_int(value):
    """vllm/utils/argparse_utils.py human_readable_int."""
    value = value.strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", value)
    if match:
        decimal = {"k": 10 ** 3, "m": 10 ** 6, "g": 10 ** 9, "t": 10 ** 12}
        binary = {"K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30, "T": 2 ** 40}
        number, suffix = match.groups()
        if suffix in decimal:
            return int(float(number) * decimal[suffix])
        if "." in number:
            raise argparse.ArgumentTypeError(
                "Decimals are not allowed with binary suffixes like %s. Did you mean to use %s%s instead?"
                % (suffix, number, suffix.lower()))
        return int(number) * binary[suffix]
    return int(value)


def human_readable_int_or_auto(value):
    value = value.strip()
    if value == "-1" or value.lower() == "auto":
        return -1
    return human_readable_int(value)


def union_dict_and_str(val):
    if not re.match(r"(?s)^\s*{.*}\s*$", val):
        return str(val)
    return _make_optional(json.loads)(val)


def parse_reasoning_parser(val):
    return "" if val.lower() == "none" else val


def check_port(value):
    try:
        value = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError("Port must be an integer") from None
    if not 1024 <= value <= 65535:
        raise argparse.ArgumentTypeError("Port must be between 1024 and 65535")
    return value


def _make_parse(return_type, shown):
    def _parse_type(val):
        try:
            return return_type(val)
        except ValueError as err:
            raise argparse.ArgumentTypeError("Value %s cannot be converted to %s." % (val, shown)) from err
    return _parse_type


def _make_optional(return_type, shown=None):
    shown = shown or ("<class '%s'>" % getattr(return_type, "__name__", return_type)
                      if return_type in (int, float, str) else str(return_type))

    def _optional_type(val):
        if val in ("", "None"):
            return None
        return _make_parse(return_type, shown)(val)
    return _optional_type


def _dataclass_json(class_name):
    def parse_dataclass(val):
        from_json = json.loads  # real vLLM validates with pydantic against the config class
        try:
            value = from_json(val)
        except ValueError as err:
            raise argparse.ArgumentTypeError(
                "1 validation error for %s\n  Invalid JSON: %s [type=json_invalid, input_value=%r, input_type=str]"
                % (class_name, err, val)) from err
        if not isinstance(value, dict):
            raise argparse.ArgumentTypeError(
                "1 validation error for %s\n  Input should be an object [type=model_type, input_value=%r]"
                % (class_name, value))
        return value
    return parse_dataclass


def build_type(desc):
    """Rebuild an argparse `type` callable from its description in the data file."""
    if not desc:
        return None
    conv = desc.get("conv")
    if conv in ("int", "float", "str"):
        return {"int": int, "float": float, "str": str}[conv]
    if conv == "optional":
        inner = desc.get("inner") or {"conv": "str"}
        inner_fn = build_type(inner)
        shown = None
        if inner.get("conv") in ("int", "float", "str"):
            shown = "<class '%s'>" % inner["conv"]
        return _make_optional(inner_fn, shown)
    if conv == "parse":
        return _make_parse(build_type(desc.get("inner")) or str, desc.get("inner_repr", ""))
    if conv == "json_loads":
        return json.loads
    if conv == "dataclass_json":
        return _dataclass_json(desc.get("class", "config"))
    named = {
        "human_readable_int": human_readable_int,
        "human_readable_int_or_auto": human_readable_int_or_auto,
        "union_dict_and_str": union_dict_and_str,
        "parse_reasoning_parser": parse_reasoning_parser,
        "check_port": check_port,
    }
    if conv in named:
        return named[conv]
    return str


# --- actions ------------------------------------------------------------------------

class _NegatableAction(argparse.Action):
    """vLLM's EnableDisableAction / argparse.BooleanOptionalAction: --x, --no-x (and
    --enable-x/--disable-x pairs); value is False when a negative spelling was used."""

    def __init__(self, option_strings, dest, negative_options=(), default=None, required=False, help=None):
        self.negative_options = set(negative_options)
        super().__init__(option_strings=option_strings, dest=dest, nargs=0, default=default,
                         required=required, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, option_string not in self.negative_options)

    def format_usage(self):
        return " | ".join(self.option_strings)


def _default(value):
    if isinstance(value, dict) and set(value) == {"repr"}:
        return None
    if value == "==SUPPRESS==":
        return argparse.SUPPRESS
    return value


class StandinParser(argparse.ArgumentParser):
    """argparse parser with vLLM's FlexibleArgumentParser pre-processing."""

    top_usage = None

    def parse_args(self, args=None, namespace=None):
        args = list(sys.argv[1:] if args is None else args)
        args = _move_model_flag(args)
        namespace, extras = self.parse_known_args(_flexible(args), namespace)
        if extras:
            # vLLM parses with the top-level `vllm` parser, which reports leftovers itself
            if self.top_usage:
                self.print_usage_top()
            self.exit(2, "vllm: error: unrecognized arguments: %s\n" % " ".join(extras))
        return namespace

    def print_usage_top(self):
        sys.stderr.write(self.top_usage + "\n")


def _move_model_flag(args):
    """`vllm serve ... --model X ...` -> `vllm serve X ...` (FlexibleArgumentParser.parse_args)."""
    for idx, arg in enumerate(args):
        if re.match(r"^--model(=.+|$)", arg):
            sys.stderr.write(
                "WARNING [argparse_utils.py] With `vllm serve`, you should provide the model as a positional "
                "argument or in a config file instead of via the `--model` option. "
                "The `--model` option will be removed in a future version.\n")
            if arg == "--model":
                if idx + 1 >= len(args):
                    return args
                return [args[idx + 1]] + args[:idx] + args[idx + 2:]
            return [arg[len("--model="):]] + args[:idx] + args[idx + 1:]
    if args and args[0].startswith("-") and "--config" not in args and any(
            re.match(r"^--served[-_]model[-_]name(=.+|$)", a) for a in args):
        raise ConfigError("`model` should be provided as the first positional argument when using "
                          "`vllm serve`. i.e. `vllm serve <model> --<arg> <value>`.")
    return args


def _flexible(args):
    """Underscores -> dashes before the first '.', `-O3`, and dotted JSON keys (argparse_utils.py)."""
    pattern = re.compile(r"(?<=--)[^\.]*")
    processed = []
    for i, arg in enumerate(args):
        if arg.startswith("--"):
            if "=" in arg:
                key, value = arg.split("=", 1)
                processed.append("%s=%s" % (pattern.sub(lambda m: m.group(0).replace("_", "-"), key, count=1), value))
            else:
                processed.append(pattern.sub(lambda m: m.group(0).replace("_", "-"), arg, count=1))
        elif arg.startswith("-O") and arg != "-O":
            processed += ["--optimization-level", arg[3:] if arg[2:3] == "=" else arg[2:]]
        elif arg == "-O" and i + 1 < len(args) and args[i + 1] in {"0", "1", "2", "3"}:
            processed.append("--optimization-level")
        else:
            processed.append(arg)

    delete = set()
    dict_args = defaultdict(dict)
    for i, arg in enumerate(processed):
        if i in delete or not arg.startswith("-") or "." not in arg:
            continue
        if arg.startswith("--") and "." not in arg.split("=", 1)[0]:
            continue
        if "=" in arg:
            arg, value_str = arg.split("=", 1)
            if "." not in arg:
                continue
        else:
            if i + 1 >= len(processed):
                continue
            value_str = processed[i + 1]
            delete.add(i + 1)
        if arg.endswith("+"):
            arg = arg[:-1]
            value_str = json.dumps(value_str.split(","))
        key, *keys = arg.split(".")
        try:
            value = json.loads(value_str)
        except ValueError:
            try:
                value = human_readable_int(value_str)
            except (ValueError, argparse.ArgumentTypeError):
                value = value_str
        nested = value
        for k in reversed(keys):
            nested = {k: nested}
        _merge(dict_args[key], nested)
        delete.add(i)
    out = [a for i, a in enumerate(processed) if i not in delete]
    for key, value in dict_args.items():
        out += [key, json.dumps(value)]
    return out


def _merge(original, update):
    for k, v in update.items():
        if isinstance(v, dict) and isinstance(original.get(k), dict):
            _merge(original[k], v)
        elif isinstance(v, list) and isinstance(original.get(k), list):
            original[k] += v
        else:
            original[k] = v


def build_parser(spec):
    parser = StandinParser(prog=spec.get("prog", "vllm serve"), usage=spec.get("usage"),
                           add_help=True, description="dgxspark LAB STAND-IN for vLLM %s `vllm serve` (no GPU, no model): "
                                       "flags from %s" % (spec.get("vllm_version"), os.path.basename(spec["_path"])))
    parser.top_usage = spec.get("top_usage")
    groups = {}
    for pos in spec.get("positionals", []):
        parser.add_argument(pos["dest"], nargs=pos.get("nargs"), default=_default(pos.get("default")),
                            type=build_type(pos.get("type")), help=pos.get("help"))
    for flag in spec["flags"]:
        kind = flag["action"]
        options = list(flag["options"])
        if kind == "_HelpAction" or "-h" in options or "--help" in options:
            continue
        group_title = flag.get("group")
        target = parser
        if group_title and group_title not in ("options", "optional arguments", "positional arguments"):
            target = groups.get(group_title)
            if target is None:
                target = groups[group_title] = parser.add_argument_group(group_title)
        kwargs = {"dest": flag["dest"], "help": (flag.get("help") or "").replace("%", "%%") or None}
        default = _default(flag.get("default"))
        negatives = flag.get("negative_options")
        if kind in ("EnableDisableAction", "BooleanOptionalAction") or negatives is not None:
            if negatives is None:  # plain BooleanOptionalAction: --no-x for every --x
                negatives = ["--no-" + o[2:] for o in options if o.startswith("--")]
            all_options = options + [n for n in negatives if n not in options]
            action_obj = target.add_argument(*all_options, action=_NegatableAction, negative_options=negatives,
                                             default=default, **kwargs)
            action_obj.option_strings = options  # hidden spellings stay registered (argparse_utils._register_action)
            continue
        if kind == "_StoreTrueAction":
            target.add_argument(*options, action="store_true", default=default, **kwargs)
            continue
        if kind == "_StoreFalseAction":
            target.add_argument(*options, action="store_false", default=default, **kwargs)
            continue
        if kind == "_StoreConstAction":
            target.add_argument(*options, action="store_const", const=flag.get("const"), default=default, **kwargs)
            continue
        if kind == "_CountAction":
            target.add_argument(*options, action="count", default=default, **kwargs)
            continue
        if kind == "_VersionAction":
            target.add_argument(*options, action="version", version=spec.get("vllm_version"))
            continue
        action = "append" if kind == "_AppendAction" else "store"
        extra = {}
        if flag.get("nargs") is not None:
            extra["nargs"] = flag["nargs"]
        if flag.get("nargs") == "?" and flag.get("const") is not None:
            extra["const"] = flag["const"]
        if flag.get("choices") is not None:
            extra["choices"] = flag["choices"]
        metavar = flag.get("metavar")
        if isinstance(metavar, list):
            metavar = "{" + ",".join(str(m) for m in metavar) + "}"
        if metavar is not None:
            extra["metavar"] = metavar
        target.add_argument(*options, action=action, type=build_type(flag.get("type")), default=default,
                            required=bool(flag.get("required")), **extra, **kwargs)
    return parser


def post_parse_checks(args, spec):
    """Checks vLLM makes after argparse (cli_args.validate_parsed_serve_args, ModelConfig).

    Raises ConfigError with vLLM's message; vLLM exits 1 with a traceback for these."""
    if getattr(args, "model_tag", None):
        args.model = args.model_tag
    if getattr(args, "enable_auto_tool_choice", False) and not getattr(args, "tool_call_parser", None):
        raise ConfigError("Error: --enable-auto-tool-choice requires --tool-call-parser", "TypeError")
    if getattr(args, "enable_log_outputs", False) and not getattr(args, "enable_log_requests", False):
        raise ConfigError("Error: --enable-log-outputs requires --enable-log-requests", "TypeError")
    checks = spec.get("config_checks") or {}
    for dest, check in checks.items():
        if dest == "distributed_executor_backend":
            continue  # needs the world size; see main.choose_backend
        value = getattr(args, dest, None)
        if value in (None, ""):
            continue
        if check.get("only_with") and not getattr(args, check["only_with"], False):
            continue
        candidate = value
        if check.get("case_insensitive"):
            if check.get("auto_means_none") and value.lower() == "auto":
                continue
            candidate = value.upper()
        if candidate in check["supported"]:
            continue
        raise ConfigError(check["message"].format(
            value=value, value_upper=str(value).upper(), supported=check["supported"],
            supported_joined=", ".join(check["supported"]), supported_comma=",".join(check["supported"])),
            check.get("exception", "ValueError"), check.get("source"))
    return args


def parse_serve_args(argv, spec=None):
    """Parse `vllm serve` argv (without the leading 'serve'). argparse errors exit 2."""
    spec = spec or load_spec()
    parser = build_parser(spec)
    args = parser.parse_args(argv)
    return post_parse_checks(args, spec)
