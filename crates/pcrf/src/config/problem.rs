//! One problem found in a configuration file, with where it is: what every
//! file the server reads (the main configuration, the usage file) reports,
//! so that all of them print their errors alike.

/// One problem in a configuration, with where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigProblem {
    /// "file:line:column" or "file: [section].key".
    pub location: String,
    pub message: String,
}

impl std::fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.location, self.message)
    }
}
