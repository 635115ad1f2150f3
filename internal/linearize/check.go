package linearize

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Verdict is the result of checking a history.
type Verdict struct {
	// Result is porcupine.Ok (linearizable), porcupine.Illegal (no order of
	// the calls explains the answers) or porcupine.Unknown (the check ran
	// out of time).
	Result porcupine.CheckResult
	// Info is porcupine's linearization data, for Visualize.
	Info porcupine.LinearizationInfo
}

// Check checks the history against the config's model, giving up after
// timeout (0: no limit).
func Check(c Config, h *History, timeout time.Duration) Verdict {
	res, info := porcupine.CheckOperationsVerbose(Model(c), h.Operations, timeout)
	return Verdict{Result: res, Info: info}
}

// Visualize writes porcupine's HTML visualization of the verdict (the
// longest partial linearizations, and where they stop) to a new file in dir
// (os.TempDir() when empty) and returns its path.
func Visualize(c Config, v Verdict, dir string) (string, error) {
	f, err := os.CreateTemp(dir, "linearize-*.html")
	if err != nil {
		return "", fmt.Errorf("linearize: visualization file: %w", err)
	}
	defer f.Close()
	if err := porcupine.Visualize(Model(c), v.Info, f); err != nil {
		return "", fmt.Errorf("linearize: visualize: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("linearize: visualization file: %w", err)
	}
	return f.Name(), nil
}

// Explain describes where each partition that is not linearizable stops:
// the end of its longest linearizable prefix (the model's state there) and
// the calls that could come next, each with the answer the model expects
// in that state. Empty when every partition is linearizable.
func Explain(c Config, h *History, v Verdict) string {
	parts := Model(c).Partition(h.Operations)
	partials := v.Info.PartialLinearizationsOperations()
	var b strings.Builder
	for p, ops := range parts {
		if p >= len(partials) {
			break
		}
		var longest []porcupine.Operation
		for _, l := range partials[p] {
			if len(l) > len(longest) {
				longest = l
			}
		}
		if len(longest) == len(ops) {
			continue
		}
		item := ops[0].Input.(Input).Item
		fmt.Fprintf(&b, "item %d: %d of %d calls linearize; the prefix ends with:\n", c.Items[item], len(longest), len(ops))
		s := Model(c).Init().(itemState)
		for i, op := range longest {
			s, _ = c.step(s, op.Input.(Input))
			if i >= len(longest)-6 {
				fmt.Fprintf(&b, "  [%d,%d] client %d: %s\n", op.Call, op.Return, op.ClientId, c.describe(op.Input.(Input), op.Output.(Output)))
			}
		}
		fmt.Fprintf(&b, "  state: %s\n", c.describeState(s))
		done := make(map[[2]int64]map[int]bool)
		for _, op := range longest {
			k := [2]int64{op.Call, op.Return}
			if done[k] == nil {
				done[k] = map[int]bool{}
			}
			done[k][op.ClientId] = true
		}
		var rest []porcupine.Operation
		deadline := int64(Infinity)
		for _, op := range ops {
			if done[[2]int64{op.Call, op.Return}][op.ClientId] {
				continue
			}
			rest = append(rest, op)
			deadline = min(deadline, op.Return)
		}
		b.WriteString("  none of the calls that could come next explains its answer:\n")
		shown := map[int]bool{}
		for _, op := range rest {
			if op.Call > deadline {
				continue
			}
			_, want := c.step(s, op.Input.(Input))
			fmt.Fprintf(&b, "  [%d,%d] client %d: %s (model: %s)\n", op.Call, op.Return, op.ClientId,
				c.describe(op.Input.(Input), op.Output.(Output)), c.describeOutput(want))
			if in := op.Input.(Input); in.Kind != SetOnHand && !shown[in.Cart] {
				shown[in.Cart] = true
				fmt.Fprintf(&b, "    every call of %s:\n", c.Token(in.Item, in.Cart))
				for _, o := range ops {
					if oi := o.Input.(Input); oi.Kind != SetOnHand && oi.Cart == in.Cart {
						fmt.Fprintf(&b, "      [%d,%d] client %d: %s\n", o.Call, o.Return, o.ClientId, c.describe(oi, o.Output.(Output)))
					}
				}
			}
		}
	}
	return b.String()
}
