//! Names `Middle` through the crate root only in a test: no arrow.

#[cfg(test)]
mod tests {
    use crate::middle::Middle;
}
