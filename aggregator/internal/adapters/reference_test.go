package adapters_test

import (
	"strings"
	"testing"

	"github.com/cozystack/cozy-health/aggregator/internal/adapters"
	"github.com/cozystack/cozy-health/pkg/doctable"
)

// adaptersPage is the reference page of the cluster adapters.
const adaptersPage = "docs/reference/adapters.md"

// TestAdaptersReference: All is the one list of cluster adapters; the
// reference page's table names the same adapters with the object each
// writes in the platform namespace (its Component; "same" repeats the row
// above) and the resources each reads (its Sources, optional ones after
// "optional:"), all compared as sets.
func TestAdaptersReference(t *testing.T) {
	var named, reads []string
	for _, a := range adapters.All() {
		named = append(named, a.Name()+" ("+a.Component()+")")
		for _, s := range a.Sources() {
			crd := a.Name() + " reads " + s.CRDName()
			if s.Optional {
				crd += " (optional)"
			}
			reads = append(reads, crd)
		}
	}

	var pageNamed, pageReads []string
	object := ""
	for _, cells := range doctable.Rows(t, doctable.Read(t, adaptersPage), "| object | adapter | reads (CRD) |") {
		if cells[0] != "same" {
			object = doctable.Code(cells[0])
		}
		name := doctable.Code(cells[1])
		pageNamed = append(pageNamed, name+" ("+object+")")
		required, optional, _ := strings.Cut(cells[2], "optional:")
		for _, crd := range doctable.Codes(required) {
			pageReads = append(pageReads, name+" reads "+crd)
		}
		for _, crd := range doctable.Codes(optional) {
			pageReads = append(pageReads, name+" reads "+crd+" (optional)")
		}
	}
	doctable.SameSet(t, "adapters.All()", named, adaptersPage+"'s adapters", pageNamed)
	doctable.SameSet(t, "adapters.All()'s Sources", reads, adaptersPage+"'s resources read", pageReads)
}
