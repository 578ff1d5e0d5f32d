// firsttoken: a wrapper module to build Tempo 3.0.3 from the Go module proxy: scripts/stack/build.sh
// tempo. The module path has no /v3 suffix, so the tag v3.0.3 is not a valid version of it; the tag's
// commit (1900ed7bb5cad1a3edc285783d7d4ac4278337dc) is required by its pseudo-version. Upstream's
// replace lines at that tag are copied here (a dependency's replace lines do not apply).
module firsttoken.invalid/stack/tempo

go 1.26.5

// Copied from github.com/grafana/tempo v3.0.3 go.mod.
replace (
	k8s.io/api => k8s.io/api v0.36.0
	k8s.io/client-go => k8s.io/client-go v0.36.0
)

replace github.com/hashicorp/memberlist => github.com/grafana/memberlist v0.3.1-0.20260410131411-8c2f3bdae9db
