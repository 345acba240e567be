module github.com/reprise-ml/reprise

go 1.26
