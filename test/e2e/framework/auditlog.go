package framework

import (
	"bytes"
	"encoding/json"
	"os"
)

// Decision is one audit line of the webhook: the keys the tests read, as
// internal/admission/decisionlog.go (decisionLine.appendFields) writes them.
type Decision struct {
	Msg          string   `json:"msg"`
	TS           string   `json:"ts"`
	UID          string   `json:"uid"`
	Stage        string   `json:"stage"`
	Operation    string   `json:"operation"`
	Namespace    string   `json:"namespace"`
	Name         string   `json:"name"`
	Decision     string   `json:"decision"`
	Rules        []string `json:"rules"`
	Message      string   `json:"message"`
	DryRun       bool     `json:"dryRun"`
	RequestedIPs []string `json:"requestedIPs"`
	FinalIPs     []string `json:"finalIPs"`
	ViewStale    float64  `json:"viewStaleSeconds"`
	Raw          string   `json:"-"`
}

// Decisions parses the audit lines ("msg":"admission decision") of the log.
func (w *Webhook) Decisions() []Decision { return w.DecisionsFrom(0) }

// DecisionsFrom parses the audit lines after byte offset from.
func (w *Webhook) DecisionsFrom(from int64) []Decision {
	data, err := os.ReadFile(w.LogPath)
	if err != nil || from > int64(len(data)) {
		return nil
	}
	data = data[from:]
	var out []Decision
	for _, line := range bytes.Split(data, []byte("\n")) {
		if !bytes.Contains(line, []byte(`"admission decision"`)) {
			continue
		}
		var d Decision
		if err := json.Unmarshal(line, &d); err != nil || d.Msg != "admission decision" {
			continue
		}
		d.Raw = string(line)
		out = append(out, d)
	}
	return out
}
