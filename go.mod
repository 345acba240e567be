module github.com/reprise-ml/reprise

go 1.26

require github.com/ebitengine/purego v0.11.3
