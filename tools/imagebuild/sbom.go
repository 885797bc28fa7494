package main

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// The SBOM is SPDX 2.3 JSON. Its contents come from the build information
// the Go linker writes into each binary (`go version -m`): exactly the
// modules compiled in, at the version and go.sum hash used, which is more
// precise than the module graph (that also lists modules no package of
// ours imports). The image adds nothing else but /etc/passwd, /etc/group
// and the --file entries, which are ours.

type spdxDoc struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      spdxCreation       `json:"creationInfo"`
	Packages          []spdxPackage      `json:"packages"`
	Relationships     []spdxRelationship `json:"relationships"`
}

type spdxCreation struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type spdxPackage struct {
	Name             string         `json:"name"`
	SPDXID           string         `json:"SPDXID"`
	VersionInfo      string         `json:"versionInfo,omitempty"`
	PackageFileName  string         `json:"packageFileName,omitempty"`
	DownloadLocation string         `json:"downloadLocation"`
	FilesAnalyzed    bool           `json:"filesAnalyzed"`
	LicenseConcluded string         `json:"licenseConcluded"`
	LicenseDeclared  string         `json:"licenseDeclared"`
	CopyrightText    string         `json:"copyrightText"`
	PrimaryPurpose   string         `json:"primaryPackagePurpose,omitempty"`
	Checksums        []spdxChecksum `json:"checksums,omitempty"`
	ExternalRefs     []spdxExtRef   `json:"externalRefs,omitempty"`
	Comment          string         `json:"comment,omitempty"`
}

type spdxChecksum struct {
	Algorithm string `json:"algorithm"`
	Value     string `json:"checksumValue"`
}

type spdxExtRef struct {
	Category string `json:"referenceCategory"`
	Type     string `json:"referenceType"`
	Locator  string `json:"referenceLocator"`
}

type spdxRelationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

var spdxIDUnsafe = regexp.MustCompile(`[^A-Za-z0-9.-]+`)

func spdxID(parts ...string) string {
	return "SPDXRef-" + spdxIDUnsafe.ReplaceAllString(strings.Join(parts, "-"), "-")
}

func goPackage(path, version, sum string) spdxPackage {
	p := spdxPackage{
		Name:             path,
		SPDXID:           spdxID("go-module", path, version),
		VersionInfo:      version,
		DownloadLocation: "NOASSERTION",
		LicenseConcluded: "NOASSERTION",
		LicenseDeclared:  "NOASSERTION",
		CopyrightText:    "NOASSERTION",
		PrimaryPurpose:   "LIBRARY",
		ExternalRefs: []spdxExtRef{{
			Category: "PACKAGE-MANAGER", Type: "purl",
			Locator: "pkg:golang/" + path + "@" + version,
		}},
	}
	if sum != "" {
		// The go.sum hash (h1:, SHA-256 over the module's file tree) has no
		// SPDX checksum algorithm; a comment keeps it checkable.
		p.Comment = "go.sum " + sum
	}
	return p
}

func sbom(o buildOptions, digest v1.Hash) ([]byte, error) {
	doc := spdxDoc{
		SPDXVersion:       "SPDX-2.3",
		DataLicense:       "CC0-1.0",
		SPDXID:            "SPDXRef-DOCUMENT",
		Name:              o.name + "-" + o.tag,
		DocumentNamespace: "https://spdx.org/spdxdocs/" + o.name + "-" + o.tag + "-" + digest.Hex,
		CreationInfo: spdxCreation{
			Created:  o.epoch.Format(time.RFC3339),
			Creators: []string{"Tool: clusterip-policy-tools-imagebuild", "Organization: clusterip-policy"},
		},
	}
	imageID := spdxID("image", o.name, o.tag)
	doc.Packages = append(doc.Packages, spdxPackage{
		Name:             o.name,
		SPDXID:           imageID,
		VersionInfo:      o.tag,
		DownloadLocation: "NOASSERTION",
		LicenseConcluded: "NOASSERTION",
		LicenseDeclared:  "Apache-2.0",
		CopyrightText:    "NOASSERTION",
		PrimaryPurpose:   "CONTAINER",
		Checksums:        []spdxChecksum{{Algorithm: "SHA256", Value: digest.Hex}},
		ExternalRefs: []spdxExtRef{{
			Category: "PACKAGE-MANAGER", Type: "purl",
			Locator: "pkg:oci/" + o.name + "@" + digest.String() + "?tag=" + o.tag,
		}},
	})
	doc.Relationships = append(doc.Relationships, spdxRelationship{"SPDXRef-DOCUMENT", "DESCRIBES", imageID})

	modules := map[string]spdxPackage{}
	for _, b := range o.binaries {
		bi, err := buildinfo.ReadFile(b.file)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", b.file, err)
		}
		data, err := os.ReadFile(b.file)
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(data)
		plat := b.platform.OS + "/" + b.platform.Architecture
		binID := spdxID("binary", o.entrypoint, b.platform.OS, b.platform.Architecture)
		doc.Packages = append(doc.Packages, spdxPackage{
			Name:             bi.Main.Path,
			SPDXID:           binID,
			VersionInfo:      o.tag,
			DownloadLocation: "NOASSERTION",
			FilesAnalyzed:    false,
			LicenseConcluded: "NOASSERTION",
			LicenseDeclared:  "Apache-2.0",
			CopyrightText:    "NOASSERTION",
			PrimaryPurpose:   "APPLICATION",
			PackageFileName:  o.entrypoint,
			Checksums:        []spdxChecksum{{Algorithm: "SHA256", Value: hex.EncodeToString(sum[:])}},
			ExternalRefs: []spdxExtRef{{
				Category: "PACKAGE-MANAGER", Type: "purl",
				Locator: "pkg:golang/" + bi.Main.Path + "@" + o.tag + "?os=" + b.platform.OS + "&arch=" + b.platform.Architecture,
			}},
			Comment: "the " + plat + " binary at " + o.entrypoint + ", built by " + bi.GoVersion + " from package " + bi.Path,
		})
		doc.Relationships = append(doc.Relationships, spdxRelationship{imageID, "CONTAINS", binID})

		std := goPackage("stdlib", bi.GoVersion, "")
		// Scanners (grype, osv-scanner) match the standard library as
		// pkg:golang/stdlib@1.26.8, without the "go".
		std.ExternalRefs[0].Locator = "pkg:golang/stdlib@" + strings.TrimPrefix(bi.GoVersion, "go")
		modules[std.SPDXID] = std
		doc.Relationships = append(doc.Relationships, spdxRelationship{binID, "DEPENDS_ON", std.SPDXID})
		for _, d := range bi.Deps {
			m := d
			if d.Replace != nil {
				m = d.Replace
			}
			p := goPackage(m.Path, m.Version, m.Sum)
			if d.Replace != nil {
				p.Comment = strings.TrimSpace(p.Comment + "; replaces " + d.Path + "@" + d.Version)
			}
			modules[p.SPDXID] = p
			doc.Relationships = append(doc.Relationships, spdxRelationship{binID, "DEPENDS_ON", p.SPDXID})
		}
	}
	ids := make([]string, 0, len(modules))
	for id := range modules {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		doc.Packages = append(doc.Packages, modules[id])
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}
