package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
)

// The completion command reads the command table it is part of, so it is
// wired here rather than in the table's literal (an initialization cycle).
func init() { lookup("completion").setup = completionCmd }

// completionCmd prints a completion script for bash, zsh or fish, made
// from the command table, so that a new command or flag completes without
// anyone editing the script.
func completionCmd(fs *flag.FlagSet) runFunc {
	return func(ctx context.Context, c *client, args []string) error {
		if len(args) != 1 {
			return usagef("completion takes one shell: bash, zsh or fish")
		}
		switch args[0] {
		case "bash":
			writeBashCompletion(c.stdout)
		case "zsh":
			// zsh runs the bash script through bashcompinit.
			fmt.Fprintln(c.stdout, "#compdef tandemctl\nautoload -U +X bashcompinit && bashcompinit")
			writeBashCompletion(c.stdout)
		case "fish":
			writeFishCompletion(c.stdout)
		default:
			return usagef("completion: unknown shell %q, want bash, zsh or fish", args[0])
		}
		return nil
	}
}

// completionWords are the words each command completes after its name:
// its flags, the global ones, and the fixed words it takes (modes, plan
// actions, shells).
func completionWords(cmd *command) []string {
	fs := newFlagSet(cmd.name)
	(&globals{}).register(fs)
	cmd.setup(fs)
	var words []string
	fs.VisitAll(func(f *flag.Flag) { words = append(words, "--"+f.Name) })
	switch cmd.name {
	case "mode":
		words = append(words, "redis", "shadow", "mysql", "mysql_only")
	case "plan":
		words = append(words, "start", "pause", "resume", "abort", "approve", "skip")
	case "completion":
		words = append(words, "bash", "zsh", "fish")
	case "resync":
		words = append(words, "mysql")
	}
	return words
}

func commandNames() []string {
	names := make([]string, 0, len(commands)+1)
	for _, c := range commands {
		names = append(names, c.name)
	}
	return append(names, "help")
}

func writeBashCompletion(w io.Writer) {
	fmt.Fprintf(w, `# tandemctl completion for bash: source <(tandemctl completion bash)
_tandemctl() {
    local cur="${COMP_WORDS[COMP_CWORD]}" cmd="" i
    for ((i = 1; i < COMP_CWORD; i++)); do
        case "${COMP_WORDS[i]}" in
            --url|--actor) ((i++)) ;;
            -*) ;;
            *) cmd="${COMP_WORDS[i]}"; break ;;
        esac
    done
    local words
    case "$cmd" in
        "") words=%q ;;
`, strings.Join(append(commandNames(), "--json", "--actor", "--url", "--version", "--help"), " "))
	for _, c := range commands {
		fmt.Fprintf(w, "        %s) words=%q ;;\n", c.name, strings.Join(completionWords(c), " "))
	}
	fmt.Fprint(w, `        help) words="`+strings.Join(commandNames(), " ")+`" ;;
    esac
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
}
complete -F _tandemctl tandemctl
`)
}

func writeFishCompletion(w io.Writer) {
	fmt.Fprintln(w, "# tandemctl completion for fish: tandemctl completion fish | source")
	fmt.Fprintln(w, "complete -c tandemctl -f")
	names := strings.Join(commandNames(), " ")
	for _, c := range commands {
		fmt.Fprintf(w, "complete -c tandemctl -n 'not __fish_seen_subcommand_from %s' -a %s -d %q\n", names, c.name, c.summary)
	}
	for _, c := range commands {
		var args []string
		for _, word := range completionWords(c) {
			if name, ok := strings.CutPrefix(word, "--"); ok {
				fmt.Fprintf(w, "complete -c tandemctl -n '__fish_seen_subcommand_from %s' -l %s\n", c.name, name)
			} else {
				args = append(args, word)
			}
		}
		if len(args) > 0 {
			fmt.Fprintf(w, "complete -c tandemctl -n '__fish_seen_subcommand_from %s' -a %q\n", c.name, strings.Join(args, " "))
		}
	}
}
