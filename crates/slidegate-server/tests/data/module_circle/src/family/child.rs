use super::Parent;

pub struct Child;

impl Parent for Child {}
