package lab

// ExplainForTest is verdict, for the tests of package lab_test.
var ExplainForTest = verdict
