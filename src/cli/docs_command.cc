#include "cli/docs_command.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace runnel::cli {

namespace {

// One visible option of a command: its spellings ("-o", "--offset"), whether it takes a value,
// and what the help says of it.
struct OptionDoc {
  std::vector<std::string> names;
  bool takes_value = false;
  std::string value_name;
  std::string description;
  std::string default_value;
  std::string envname;
  bool is_help = false;  // -h/--help, which every command has: described once
};

// One visible positional argument.
struct ArgumentDoc {
  std::string name;
  std::string description;
  bool required = false;
  bool repeated = false;
};

// One command path ("runnel", "runnel group", "runnel group ack") and what it declares.
struct CommandDoc {
  std::string path;
  std::string description;
  std::vector<std::string> children;  // visible subcommand names, in declaration order
  std::vector<std::string> child_descriptions;
  std::vector<OptionDoc> options;
  std::vector<ArgumentDoc> arguments;
};

bool Visible(const CLI::App* app) {
  return !app->get_group().empty();
}

// The placeholder of an option's value: CLI11's type name ("UINT", "TEXT") or its validator's
// name ("STORE" of "TEXT:STORE"); a range or set stays in the description.
std::string ValueName(const std::string& type_name) {
  const size_t colon = type_name.find(':');
  if (colon == std::string::npos) return type_name;
  const std::string after = type_name.substr(colon + 1);
  bool word = !after.empty();
  for (char c : after) word = word && ((c >= 'A' && c <= 'Z') || c == '_');
  return word ? after : type_name.substr(0, colon);
}

void Collect(const CLI::App& app, const std::string& path, std::vector<CommandDoc>* out) {
  CommandDoc doc;
  doc.path = path;
  doc.description = app.get_description();
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->get_group().empty()) continue;  // hidden
    const bool named = !opt->get_snames().empty() || !opt->get_lnames().empty();
    if (!named) {
      if (!opt->get_positional()) continue;
      ArgumentDoc arg;
      arg.name = opt->get_name();
      arg.description = opt->get_description();
      arg.required = opt->get_required();
      arg.repeated = opt->get_items_expected_max() > 1;
      doc.arguments.push_back(std::move(arg));
      continue;
    }
    OptionDoc o;
    for (const std::string& s : opt->get_snames()) o.names.push_back("-" + s);
    for (const std::string& l : opt->get_lnames()) o.names.push_back("--" + l);
    // A flag expects no value (CLI11's add_flag sets expected(0)).
    o.takes_value = opt->get_expected_max() > 0;
    o.value_name = ValueName(opt->get_type_name());
    o.is_help = opt == app.get_help_ptr();
    o.description = opt->get_description();
    o.default_value = opt->get_default_str();
    o.envname = opt->get_envname();
    doc.options.push_back(std::move(o));
  }
  std::vector<const CLI::App*> subs = app.get_subcommands(Visible);
  for (const CLI::App* sub : subs) {
    doc.children.push_back(sub->get_name());
    doc.child_descriptions.push_back(sub->get_description());
  }
  out->push_back(std::move(doc));
  for (const CLI::App* sub : subs) Collect(*sub, path + " " + sub->get_name(), out);
}

// Every command path of `app`, the root first, each parent before its children. The root's
// options are global: they are offered on every command path too.
std::vector<CommandDoc> Commands(const CLI::App& app) {
  std::vector<CommandDoc> out;
  Collect(app, "runnel", &out);
  return out;
}

// The spellings a command path accepts: its own options and the root's, each once.
std::vector<const OptionDoc*> OfferedOptions(const CommandDoc& cmd, const CommandDoc& root) {
  std::vector<const OptionDoc*> out;
  std::set<std::string> seen;
  auto add = [&](const OptionDoc& o) {
    if (seen.insert(o.names.front()).second) out.push_back(&o);
  };
  for (const OptionDoc& o : cmd.options) add(o);
  if (&cmd != &root) {
    for (const OptionDoc& o : root.options) add(o);
  }
  return out;
}

// A shell word in single quotes.
std::string Quoted(std::string_view s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  out += '\'';
  return out;
}

// The first sentence of a description, at most 100 bytes: what a completion menu shows.
std::string Short(std::string_view description) {
  size_t end = description.find("; ");
  size_t paren = description.find(" (");
  if (paren < end) end = paren;
  std::string s(description.substr(0, end));
  if (s.size() > 100) s = s.substr(0, 97) + "...";
  return s;
}

std::string JoinWords(const std::vector<std::string>& words) {
  std::string out;
  for (const std::string& w : words) {
    if (!out.empty()) out += ' ';
    out += w;
  }
  return out;
}

// Escapes text for a roff line: backslashes and hyphens, and a leading dot or quote.
std::string Roff(std::string_view text) {
  std::string out;
  bool line_start = true;
  for (char c : text) {
    if (line_start && (c == '.' || c == '\'')) out += "\\&";
    line_start = false;
    if (c == '\\') {
      out += "\\e";
    } else if (c == '-') {
      out += "\\-";
    } else {
      out += c;
      if (c == '\n') line_start = true;
    }
  }
  return out;
}

// A description as a roff sentence: escaped, ending with a full stop.
std::string Sentence(std::string_view description) {
  std::string out = Roff(description);
  if (!out.empty() && out.back() != '.') out += '.';
  return out;
}

}  // namespace

std::string BashCompletion(const CLI::App& app) {
  const std::vector<CommandDoc> cmds = Commands(app);
  std::string out =
      "# bash completion for runnel, generated by `runnel completion bash` from the commands and\n"
      "# options the binary declares.\n"
      "_runnel_spec() {\n"
      "  case $1 in\n";
  for (const CommandDoc& cmd : cmds) {
    std::vector<std::string> options;
    std::vector<std::string> valued;
    for (const OptionDoc* o : OfferedOptions(cmd, cmds.front())) {
      for (const std::string& n : o->names) {
        options.push_back(n);
        if (o->takes_value) valued.push_back(n);
      }
    }
    out += "    " + Quoted(cmd.path) + ")\n";
    out += "      _runnel_children=" + Quoted(JoinWords(cmd.children)) + "\n";
    out += "      _runnel_options=" + Quoted(JoinWords(options)) + "\n";
    out += "      _runnel_valued=" + Quoted(JoinWords(valued)) + " ;;\n";
  }
  out +=
      "    *) _runnel_children='' _runnel_options='' _runnel_valued='' ;;\n"
      "  esac\n"
      "}\n"
      "\n"
      "_runnel() {\n"
      "  local cur=${COMP_WORDS[COMP_CWORD]} cmdpath=runnel word i skip=0\n"
      "  local _runnel_children _runnel_options _runnel_valued\n"
      "  _runnel_spec \"$cmdpath\"\n"
      "  for ((i = 1; i < COMP_CWORD; i++)); do\n"
      "    word=${COMP_WORDS[i]}\n"
      "    if ((skip)); then skip=0; continue; fi\n"
      "    case $word in\n"
      "      --*=*) ;;\n"
      "      -*) [[ \" $_runnel_valued \" == *\" $word \"* ]] && skip=1 ;;\n"
      "      *)\n"
      "        if [[ \" $_runnel_children \" == *\" $word \"* ]]; then\n"
      "          cmdpath=\"$cmdpath $word\"\n"
      "          _runnel_spec \"$cmdpath\"\n"
      "        fi ;;\n"
      "    esac\n"
      "  done\n"
      "  if ((skip)); then\n"
      "    mapfile -t COMPREPLY < <(compgen -f -- \"$cur\")\n"
      "  elif [[ $cur == -* || -z $_runnel_children ]]; then\n"
      "    if [[ $cur == -* ]]; then\n"
      "      mapfile -t COMPREPLY < <(compgen -W \"$_runnel_options\" -- \"$cur\")\n"
      "    else\n"
      "      mapfile -t COMPREPLY < <(compgen -f -- \"$cur\")\n"
      "    fi\n"
      "  else\n"
      "    mapfile -t COMPREPLY < <(compgen -W \"$_runnel_children\" -- \"$cur\")\n"
      "  fi\n"
      "}\n"
      "complete -F _runnel runnel\n";
  return out;
}

std::string ZshCompletion(const CLI::App& app) {
  const std::vector<CommandDoc> cmds = Commands(app);
  std::string out =
      "#compdef runnel\n"
      "# zsh completion for runnel, generated by `runnel completion zsh` from the commands and\n"
      "# options the binary declares.\n"
      "_runnel() {\n"
      "  local cmdpath=runnel word i skip=0\n"
      "  local -a cmds opts\n"
      "  local -A children valued\n"
      "  children=(\n";
  for (const CommandDoc& cmd : cmds) {
    out += "    " + Quoted(cmd.path) + " " + Quoted(" " + JoinWords(cmd.children) + " ") + "\n";
  }
  out += "  )\n  valued=(\n";
  for (const CommandDoc& cmd : cmds) {
    std::vector<std::string> valued;
    for (const OptionDoc* o : OfferedOptions(cmd, cmds.front())) {
      if (!o->takes_value) continue;
      for (const std::string& n : o->names) valued.push_back(n);
    }
    out += "    " + Quoted(cmd.path) + " " + Quoted(" " + JoinWords(valued) + " ") + "\n";
  }
  out +=
      "  )\n"
      "  for ((i = 2; i < CURRENT; i++)); do\n"
      "    word=${words[i]}\n"
      "    if ((skip)); then skip=0; continue; fi\n"
      "    case $word in\n"
      "      --*=*) ;;\n"
      "      -*) [[ ${valued[$cmdpath]} == *\" $word \"* ]] && skip=1 ;;\n"
      "      *) [[ ${children[$cmdpath]} == *\" $word \"* ]] && cmdpath=\"$cmdpath $word\" ;;\n"
      "    esac\n"
      "  done\n"
      "  if ((skip)); then _files; return; fi\n"
      "  case $cmdpath in\n";
  for (const CommandDoc& cmd : cmds) {
    out += "    " + Quoted(cmd.path) + ")\n      cmds=(";
    for (size_t i = 0; i < cmd.children.size(); ++i) {
      out += " " + Quoted(cmd.children[i] + ":" + Short(cmd.child_descriptions[i]));
    }
    out += " )\n      opts=(";
    for (const OptionDoc* o : OfferedOptions(cmd, cmds.front())) {
      for (const std::string& n : o->names) out += " " + Quoted(n + ":" + Short(o->description));
    }
    out += " ) ;;\n";
  }
  out +=
      "  esac\n"
      "  if [[ $PREFIX == -* ]]; then\n"
      "    _describe -t options option opts\n"
      "  elif (( ${#cmds} )); then\n"
      "    _describe -t commands command cmds\n"
      "  else\n"
      "    _files\n"
      "  fi\n"
      "}\n"
      "_runnel \"$@\"\n";
  return out;
}

std::string ManPage(const CLI::App& app, std::string_view version) {
  const std::vector<CommandDoc> cmds = Commands(app);
  const CommandDoc& root = cmds.front();
  std::string out;
  out += ".\\\" Generated by `runnel manpage` from the commands and options the binary declares.\n";
  out += ".TH RUNNEL 1 \"\" \"runnel " + Roff(version) + "\" \"User Commands\"\n";
  out += ".SH NAME\nrunnel \\- a durable event\\-stream engine: server and command\\-line client\n";
  out += ".SH SYNOPSIS\n.B runnel\n.I command\n.RI [ options ]\n.RI [ arguments ]\n";
  out += ".SH DESCRIPTION\n" + Sentence(root.description) + "\n";
  out +=
      ".PP\n"
      ".B runnel serve\n"
      "serves the Durable Streams protocol over HTTP; the other commands are its clients and\n"
      "offline tools.\n"
      "Every option that names an environment variable may be set through it instead.\n";
  auto options_of = [&out](const std::vector<OptionDoc>& options) {
    for (const OptionDoc& o : options) {
      if (o.is_help) continue;
      out += ".TP\n";
      for (size_t i = 0; i < o.names.size(); ++i) {
        if (i > 0) out += ", ";
        out += "\\fB" + Roff(o.names[i]) + "\\fR";
      }
      if (o.takes_value) {
        out += " \\fI" + Roff(o.value_name.empty() ? "VALUE" : o.value_name) + "\\fR";
      }
      out += "\n" + Sentence(o.description);
      if (!o.default_value.empty()) out += "\nDefault: " + Roff(o.default_value) + ".";
      if (!o.envname.empty()) out += "\nEnvironment: \\fB" + Roff(o.envname) + "\\fR.";
      out += "\n";
    }
  };
  out +=
      ".SH GLOBAL OPTIONS\n.TP\n\\fB\\-h\\fR, \\fB\\-\\-help\\fR\n"
      "Print the help of the command it follows and exit.\n";
  options_of(root.options);
  out += ".SH COMMANDS\n";
  for (size_t c = 1; c < cmds.size(); ++c) {
    const CommandDoc& cmd = cmds[c];
    out += ".SS \"" + Roff(cmd.path) + "\"\n";
    out += ".B " + Roff(cmd.path) + "\n";
    if (!cmd.children.empty()) out += ".I subcommand\n";
    bool has_options = false;
    for (const OptionDoc& o : cmd.options) has_options = has_options || !o.is_help;
    if (has_options) out += ".RI [ options ]\n";
    for (const ArgumentDoc& arg : cmd.arguments) {
      const std::string name = Roff(arg.name) + (arg.repeated ? " ..." : "");
      out += arg.required ? ".I " + name + "\n" : ".RI [ " + name + " ]\n";
    }
    out += ".PP\n" + Sentence(cmd.description) + "\n";
    if (!cmd.children.empty()) {
      out += ".PP\nSubcommands: ";
      for (size_t i = 0; i < cmd.children.size(); ++i) {
        if (i > 0) out += ", ";
        out += "\\fB" + Roff(cmd.children[i]) + "\\fR";
      }
      out += ".\n";
    }
    for (const ArgumentDoc& arg : cmd.arguments) {
      out += ".TP\n\\fI" + Roff(arg.name) + "\\fR\n" + Sentence(arg.description) + "\n";
    }
    options_of(cmd.options);
  }
  out += ".SH EXIT STATUS\n" + Roff(app.get_footer()) + "\n";
  out +=
      ".SH FILES\n"
      ".TP\n/var/lib/runnel\n"
      "The data directory of the packaged service (its StateDirectory).\n"
      ".TP\n/etc/default/runnel\n"
      "Flags and RUNNEL_* variables for the packaged service (runnel.service).\n"
      ".SH ENVIRONMENT\n"
      "The variables named under each option above; and\n"
      ".TP\n.B RUNNEL_CLIENT_TIMEOUT_MS\n"
      "How long a client command waits for the server to answer (default 120000).\n"
      ".SH SEE ALSO\n"
      ".BR systemctl (1),\n"
      ".BR journalctl (1)\n";
  return out;
}

void AddDocsCommands(CLI::App& app) {
  CLI::App* root = &app;
  auto* completion = app.add_subcommand("completion", "Print a shell completion script");
  completion->group("");  // hidden: for packaging, not for daily use
  auto shell = std::make_shared<std::string>();
  completion->add_option("shell", *shell, "bash or zsh")
      ->required()
      ->check(CLI::IsMember({"bash", "zsh"}));
  completion->callback([root, shell] {
    const std::string text = *shell == "bash" ? BashCompletion(*root) : ZshCompletion(*root);
    std::fwrite(text.data(), 1, text.size(), stdout);
  });
  auto* manpage = app.add_subcommand("manpage", "Print the runnel(1) man page in roff");
  manpage->group("");
  manpage->callback([root] {
    const std::string text = ManPage(*root, RUNNEL_VERSION);
    std::fwrite(text.data(), 1, text.size(), stdout);
  });
}

}  // namespace runnel::cli
