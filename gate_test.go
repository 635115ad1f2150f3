package tandem_test

import (
	"testing"

	"github.com/tandemhq/tandem"
)

func TestGateUnit(t *testing.T) {
	tests := []struct{ gate, want string }{
		{tandem.GateComparisons, tandem.UnitCount},
		{tandem.GateDivergenceRate, tandem.UnitRatio},
		{tandem.GateAudit, tandem.UnitClean},
		{"mysql_p99_factor", tandem.UnitMS}, // its value and threshold are milliseconds (the p99 service level)
		{"shadow_p99_factor", tandem.UnitFactor},
		{"mysql_error_rate", tandem.UnitRatio},
		{"min_soak", tandem.UnitSeconds},
		{"rehearsal", tandem.UnitMS},
		{"mysql_p99_ms", tandem.UnitMS},
		{"something_else", ""},
	}
	for _, tt := range tests {
		if got := tandem.GateUnit(tt.gate); got != tt.want {
			t.Errorf("GateUnit(%q): got %q, want %q", tt.gate, got, tt.want)
		}
	}
}
