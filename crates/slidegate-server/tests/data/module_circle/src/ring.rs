use crate::middle::Middle;

pub struct Ring(pub Middle);
